package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const tlsUsage = `usage: bk bookie tls-init [flags] DIR   make a development CA, a bookie certificate and a client certificate in DIR

Files (PEM): ca.pem, ca-key.pem, bookie.pem, bookie-key.pem, client.pem, client-key.pem.
The bookie certificate serves TLS and is also the client certificate of the autorecovery
beside the bookie; docs/security.md, "Transport encryption", has the whole recipe.
For development and tests: in production, use your organisation's CA.`

// tlsFiles are the files bk bookie tls-init writes, in DIR.
var tlsFiles = []string{"ca.pem", "ca-key.pem", "bookie.pem", "bookie-key.pem", "client.pem", "client-key.pem"}

// runBookieTLSInit is bk bookie tls-init DIR: a development CA and certificates.
func runBookieTLSInit(args []string) error {
	fs := flag.NewFlagSet("bookie tls-init", flag.ExitOnError)
	hosts := fs.String("hosts", "", "comma-separated DNS names and IP addresses the bookie certificate names: the hosts clients dial (default: localhost, 127.0.0.1 and this host's name)")
	days := fs.Int("days", 365, "validity of the certificates, in days")
	force := fs.Bool("force", false, "overwrite files already in DIR")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New(tlsUsage)
	}
	if *days <= 0 {
		return fmt.Errorf("--days %d: must be positive", *days)
	}
	dir := pos[0]
	names := strings.Split(*hosts, ",")
	if *hosts == "" {
		names = []string{"localhost", "127.0.0.1"}
		if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
			names = append(names, h)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !*force {
		for _, f := range tlsFiles {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return fmt.Errorf("%s exists: bk bookie tls-init does not overwrite certificates (--force does)", filepath.Join(dir, f))
			}
		}
	}
	if err := writeDevPKI(dir, names, time.Duration(*days)*24*time.Hour); err != nil {
		return err
	}
	abs, _ := filepath.Abs(dir)
	fmt.Printf(`development CA and certificates in %[1]s (bookie certificate for %[2]s, valid %[3]d days)
bookie: bk bookie --tls-listen HOST:PORT --tls-cert %[1]s/bookie.pem --tls-key %[1]s/bookie-key.pem \
          --tls-client-ca %[1]s/ca.pem ...   with "autorecovery_tls_ca_file": "%[1]s/ca.pem" in its config file
client: bk ledger write --bookie-tls-ca %[1]s/ca.pem --bookie-tls-cert %[1]s/client.pem --bookie-tls-key %[1]s/client-key.pem ...
Keep ca-key.pem private: whoever holds it can make certificates the cluster trusts.
`, abs, strings.Join(names, ", "), *days)
	return nil
}

// writeDevPKI writes a new CA (ECDSA P-256), a bookie certificate for names (server and
// client authentication) and a client certificate, all valid for validity, into dir.
func writeDevPKI(dir string, names []string, validity time.Duration) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "bookie-go development CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("tls-init: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCertAndKey(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	issue := func(base, cn string, usage []x509.ExtKeyUsage, names []string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(validity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
		}
		for _, n := range names {
			if n = strings.TrimSpace(n); n == "" {
				continue
			} else if ip := net.ParseIP(n); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, n)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("tls-init: %s certificate: %w", base, err)
		}
		return writeCertAndKey(dir, base, der, key)
	}
	if err := issue("bookie", "bookie-go bookie", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, names); err != nil {
		return err
	}
	return issue("client", "bookie-go client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil)
}

// serial returns a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// writeCertAndKey writes dir/base.pem (mode 0644) and dir/base-key.pem (0600).
func writeCertAndKey(dir, base string, der []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, base+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("tls-init: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, base+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("tls-init: %w", err)
	}
	return nil
}
