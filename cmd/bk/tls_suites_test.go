package main

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestBKTLSOffersAEADOnly: the TLS configs bk dials bookies with (the
// --bookie-tls-* flags, and the autorecovery beside a TLS bookie) fail the
// handshake with a TLS 1.2 server that accepts only CBC suites with SHA-1
// MACs, and succeed with one that accepts ECDHE AES-GCM.
func TestBKTLSOffersAEADOnly(t *testing.T) {
	p := metatest.NewPKI(t)
	serverCert, err := tls.LoadX509KeyPair(p.ServerCertFile, p.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	flagsCfg, err := (&bookieTLSFlags{ca: p.CAFile, serverName: "localhost"}).config()
	if err != nil {
		t.Fatal(err)
	}
	bcfg := bookie.Config{TLSListen: "127.0.0.1:0", Metadata: "etcd://127.0.0.1:1", TLSCertFile: p.ClientCertFile,
		TLSKeyFile: p.ClientKeyFile, AutorecoveryTLSCAFile: p.CAFile}
	recoveryCfg, err := autorecoveryTLS(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	recoveryCfg.ServerName = "localhost"

	// handshake runs a TLS 1.2 server accepting only suites and dials it
	// with cfg; it returns the client's handshake error.
	handshake := func(cfg *tls.Config, suites []uint16) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{serverCert}, CipherSuites: suites,
				MaxVersion: tls.VersionTLS12}).Handshake()
		}()
		nc, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		return tls.Client(nc, cfg.Clone()).Handshake()
	}
	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}
	gcm := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}
	for name, cfg := range map[string]*tls.Config{"--bookie-tls-*": flagsCfg, "autorecovery": recoveryCfg} {
		if err := handshake(cfg, cbc); err == nil {
			t.Errorf("%s: shook hands with a server offering only CBC-SHA1 suites", name)
		}
		if err := handshake(cfg, gcm); err != nil {
			t.Errorf("%s: with a server offering ECDHE AES-GCM: %v", name, err)
		}
	}
}
