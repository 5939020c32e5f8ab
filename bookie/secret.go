package bookie

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
)

// MinSecretSize is the shortest cluster secret, in bytes after surrounding
// white space is trimmed, that a bookie or bk accepts from a secret file or
// BK_CLUSTER_SECRET. A client sends its AUTH proof, an HMAC keyed by the
// secret over inputs the other end knows, before the bookie has proved
// itself, so whoever poses as a bookie collects proofs to guess the secret
// offline; 16 bytes (128 bits when random) keeps that out of reach. See
// docs/security.md ("Authentication").
const MinSecretSize = 16

// ErrSecretTooShort is returned (wrapped, naming where the secret came from)
// for a cluster secret shorter than MinSecretSize.
var ErrSecretTooShort = errors.New("cluster secret too short")

// CheckSecret returns an error wrapping ErrSecretTooShort, naming source
// (the config key or environment variable the secret came from) and the
// rule, when secret is shorter than MinSecretSize.
func CheckSecret(source string, secret []byte) error {
	if len(secret) < MinSecretSize {
		return fmt.Errorf("%s: %w: %d bytes, it must be at least %d (generate one with: head -c 32 /dev/urandom | base64)",
			source, ErrSecretTooShort, len(secret), MinSecretSize)
	}
	return nil
}

// readSecretFile reads the cluster secret from path (config key
// secret_file), trimming surrounding white space. Its errors name the key
// and the file; a secret shorter than MinSecretSize is one.
func readSecretFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret_file: %w", err)
	}
	secret := bytes.TrimSpace(data)
	if len(secret) == 0 {
		return nil, fmt.Errorf("secret_file %s is empty", path)
	}
	if err := CheckSecret("secret_file "+path, secret); err != nil {
		return nil, err
	}
	return secret, nil
}

// equalSecret reports whether a and b are equal in time that depends only
// on their lengths, not on where they differ, so that a client cannot learn
// a master key or proof byte by byte from how long a refusal takes. Every
// comparison of a master key or an AUTH proof in the bookie goes through it.
func equalSecret(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }
