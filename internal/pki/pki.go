// Package pki makes throwaway certificate authorities for tests and
// benchmarks: a CA and a server and a client certificate it signed, as PEM
// files (ECDSA P-256, valid for a day). Never use them in production.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a CA and the two certificates it signed: a server certificate for
// 127.0.0.1 and localhost, and a client certificate. The files are PEM.
type PKI struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string

	// Roots holds the CA; Client is the client certificate with its key.
	Roots  *x509.CertPool
	Client tls.Certificate
}

// Write creates a new CA and its certificates in dir (which must exist).
// Each call makes a CA that trusts none of the others' certificates.
func Write(dir, name string) (*PKI, error) {
	p := &PKI{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		Roots:          x509.NewCertPool(),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.Roots.AddCert(ca)
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, certFile, keyFile string) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("pki: %s certificate: %w", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
	}
	if _, err := issue(2, name+" server", x509.ExtKeyUsageServerAuth, p.ServerCertFile, p.ServerKeyFile); err != nil {
		return nil, err
	}
	if p.Client, err = issue(3, name+" client", x509.ExtKeyUsageClientAuth, p.ClientCertFile, p.ClientKeyFile); err != nil {
		return nil, err
	}
	return p, nil
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
