package meta

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// DefaultPrefix is the key prefix used when an endpoint names none.
const DefaultPrefix = "/bookie-go"

// DefaultEtcdPort is used for an endpoint host given without a port.
const DefaultEtcdPort = "2379"

// PasswordEnv names the environment variable Open takes the etcd password
// from when the endpoint names a user but no password-file.
const PasswordEnv = "BK_ETCD_PASSWORD"

// Endpoints is a parsed metadata endpoint: the etcd cluster's client
// addresses, the key prefix under which this cluster's data lives, and how
// to connect: TLS files and the etcd user. It never holds a password, only
// where to read one, so printing it leaks no secret.
type Endpoints struct {
	// Addrs are "host:port" client addresses, in the order given.
	Addrs []string
	// Prefix starts with '/' and does not end with one.
	Prefix string
	// TLS is set by the etcds:// scheme: connections use TLS and verify
	// the server's certificate against CAFile, or the system roots when
	// CAFile is empty.
	TLS bool
	// CAFile is a PEM file of the certificate authorities that sign the
	// etcd servers' certificates (query key "ca"). Only with TLS.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key,
	// for an etcd that requires client certificates (query keys "cert"
	// and "key"). Both or neither; only with TLS.
	CertFile, KeyFile string
	// ServerName is the name the servers' certificates are checked for
	// (query key "server-name"); empty means the host of each address.
	// Only with TLS.
	ServerName string
	// User is the etcd user to authenticate as (query key "user"); empty
	// means no authentication.
	User string
	// PasswordFile holds User's password (query key "password-file"); when
	// empty, the password is taken from $BK_ETCD_PASSWORD. Only with User.
	PasswordFile string
}

// String formats e in the form ParseEndpoints accepts: the default prefix
// is left out, the query keys come in a fixed order, and their values are
// percent-escaped where needed. The result carries no secret (see
// Endpoints).
func (e Endpoints) String() string {
	scheme := "etcd://"
	if e.TLS {
		scheme = "etcds://"
	}
	s := scheme + strings.Join(e.Addrs, ",")
	if e.Prefix != DefaultPrefix {
		s += e.Prefix
	}
	sep := "?"
	for _, p := range e.params() {
		if *p.field != "" {
			s += sep + p.key + "=" + escapeParam(*p.field)
			sep = "&"
		}
	}
	return s
}

// param is one query key and the field it sets.
type param struct {
	key   string
	field *string
}

// params lists e's query keys in the order String writes them.
func (e *Endpoints) params() []param {
	return []param{
		{"ca", &e.CAFile},
		{"cert", &e.CertFile},
		{"key", &e.KeyFile},
		{"server-name", &e.ServerName},
		{"user", &e.User},
		{"password-file", &e.PasswordFile},
	}
}

// numTLSParams counts the keys at the start of params that need etcds://:
// ca, cert, key, server-name.
const numTLSParams = 4

// ParseEndpoints parses a metadata endpoint, the form every --metadata flag
// takes:
//
//	etcd://host:port[,host:port...][/prefix][?key=value&...]
//	etcds://host:port[,host:port...][/prefix][?key=value&...]
//
// Hosts may be names, IPv4 or bracketed IPv6 addresses ("[::1]:2379"); a
// missing port means 2379. The optional path is the key prefix (default
// "/bookie-go"), which lets several clusters share one etcd.
//
// etcds:// connects with TLS, verifying the servers' certificates against
// the system roots unless ca names a CA file. The query keys are:
//
//	ca=PATH            PEM CA certificates to verify the servers with (etcds only)
//	cert=PATH          PEM client certificate, for client-certificate auth (etcds only, with key)
//	key=PATH           PEM key of cert (etcds only, with cert)
//	server-name=NAME   name to verify the servers' certificates for (etcds only)
//	user=NAME          etcd user to authenticate as
//	password-file=PATH file holding user's password; else $BK_ETCD_PASSWORD
//
// A password never goes in the endpoint (it ends up in process lists, logs
// and shell history): "password" and user info ("user:pw@host") are
// errors, and so are unknown, repeated or empty keys. Values are
// percent-decoded ("%20"; '+' stays '+'). ParseEndpoints reads no file:
// Open, and ClientConfig, do.
func ParseEndpoints(s string) (Endpoints, error) {
	fail := func(format string, args ...any) (Endpoints, error) {
		return Endpoints{}, fmt.Errorf("meta: metadata endpoint %q: %s", redact(s), fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return fail("want etcd://host:port[,host:port...][/prefix][?query] or etcds://...")
	}
	ep := Endpoints{Prefix: DefaultPrefix}
	switch {
	case strings.EqualFold(scheme, "etcd"):
	case strings.EqualFold(scheme, "etcds"):
		ep.TLS = true
	default:
		return fail("unsupported scheme %q, only etcd:// and etcds:// (TLS) are supported", scheme)
	}
	if strings.ContainsAny(rest, "# \t") {
		return fail("fragments and spaces are not allowed")
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if strings.Contains(rest, "@") {
		return fail("user info is not allowed: give the user as ?user=NAME and its password in password-file=PATH or $%s", PasswordEnv)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	if prefix = strings.TrimRight(prefix, "/"); prefix != "" {
		ep.Prefix = "/" + prefix
		if strings.Contains(ep.Prefix, "//") {
			return fail("empty component in prefix")
		}
	}
	if hosts == "" {
		return fail("no hosts")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		addr, err := parseHostPort(h)
		if err != nil {
			return fail("%v", err)
		}
		ep.Addrs = append(ep.Addrs, addr)
	}
	if hasQuery {
		if err := ep.parseQuery(query); err != nil {
			return fail("%v", err)
		}
	}
	return ep, nil
}

// parseQuery sets e's TLS and auth fields from "key=value&..." and checks
// that they go together.
func (e *Endpoints) parseQuery(query string) error {
	if query == "" {
		return fmt.Errorf("empty query")
	}
	params := e.params()
	for kv := range strings.SplitSeq(query, "&") {
		key, raw, ok := strings.Cut(kv, "=")
		if strings.EqualFold(key, "password") {
			return fmt.Errorf("a password does not go in the endpoint: use password-file=PATH or $%s", PasswordEnv)
		}
		var field *string
		for _, p := range params {
			if p.key == key {
				field = p.field
			}
		}
		if field == nil {
			return fmt.Errorf("unknown parameter %q (known: ca, cert, key, server-name, user, password-file)", key)
		}
		if *field != "" {
			return fmt.Errorf("parameter %q given twice", key)
		}
		value, err := url.PathUnescape(raw)
		if err != nil {
			return fmt.Errorf("parameter %q: bad escape in %q", key, raw)
		}
		if !ok || value == "" {
			return fmt.Errorf("parameter %q: empty value", key)
		}
		*field = value
	}
	if !e.TLS {
		for _, p := range params[:numTLSParams] {
			if *p.field != "" {
				return fmt.Errorf("parameter %q needs TLS: use etcds://", p.key)
			}
		}
	}
	switch {
	case e.CertFile != "" && e.KeyFile == "":
		return fmt.Errorf("cert needs key (the client certificate's private key)")
	case e.KeyFile != "" && e.CertFile == "":
		return fmt.Errorf("key needs cert (the client certificate)")
	case e.PasswordFile != "" && e.User == "":
		return fmt.Errorf("password-file needs user")
	}
	return nil
}

// escapeParam percent-escapes a query value so that ParseEndpoints reads
// it back unchanged: everything but letters, digits and -._~/:,+ is
// escaped, so paths stay readable.
func escapeParam(v string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/:,+", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// redact hides what may be a password in a rejected endpoint before it is
// quoted in an error: user info before '@' and the value of a "password"
// parameter.
func redact(s string) string {
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		authority, tail := rest, ""
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority, tail = rest[:i], rest[i:]
		}
		if i := strings.LastIndexByte(authority, '@'); i >= 0 {
			authority = "REDACTED" + authority[i:]
		}
		s = scheme + "://" + authority + tail
	}
	head, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	kvs := strings.Split(query, "&")
	for i, kv := range kvs {
		if key, _, _ := strings.Cut(kv, "="); strings.EqualFold(key, "password") {
			kvs[i] = "password=REDACTED"
		}
	}
	return head + "?" + strings.Join(kvs, "&")
}

// parseHostPort validates one "host[:port]" and returns "host:port".
func parseHostPort(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("empty host")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// A host without port: a name, IPv4, or bracketed IPv6.
		host, port = h, DefaultEtcdPort
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			host = h[1 : len(h)-1]
			if net.ParseIP(host) == nil {
				return "", fmt.Errorf("host %q: bad IPv6 address", h)
			}
		} else if strings.ContainsAny(h, ":[]") {
			return "", fmt.Errorf("host %q: %v", h, err)
		}
	}
	if host == "" {
		return "", fmt.Errorf("host %q: empty host name", h)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("host %q: bad port %q", h, port)
	}
	return net.JoinHostPort(host, port), nil
}
