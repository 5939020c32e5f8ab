package meta

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		in     string
		addrs  []string
		prefix string
		bad    bool
	}{
		{in: "etcd://127.0.0.1:2379", addrs: []string{"127.0.0.1:2379"}, prefix: DefaultPrefix},
		{in: "etcd://a:1,b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}, prefix: DefaultPrefix},
		{in: "ETCD://a:1", addrs: []string{"a:1"}, prefix: DefaultPrefix},
		{in: "etcd://a:1/", addrs: []string{"a:1"}, prefix: DefaultPrefix},
		{in: "etcd://a:1/team/bk/", addrs: []string{"a:1"}, prefix: "/team/bk"},
		{in: "etcd://etcd.example", addrs: []string{"etcd.example:2379"}, prefix: DefaultPrefix},
		{in: "etcd://[::1]:2379,[fe80::1]", addrs: []string{"[::1]:2379", "[fe80::1]:2379"}, prefix: DefaultPrefix},
		{in: "etcd://10.0.0.1,10.0.0.2:4000/x", addrs: []string{"10.0.0.1:2379", "10.0.0.2:4000"}, prefix: "/x"},
		{in: "etcds://a:1/x?ca=/c", addrs: []string{"a:1"}, prefix: "/x"},
		{in: "", bad: true},
		{in: "127.0.0.1:2379", bad: true},
		{in: "http://a:1", bad: true},
		{in: "zk://a:1", bad: true},
		{in: "etcd://", bad: true},
		{in: "etcd:///prefix", bad: true},
		{in: "etcd://a:1,,b:2", bad: true},
		{in: "etcd://a:1,", bad: true},
		{in: "etcd://a:0", bad: true},
		{in: "etcd://a:65536", bad: true},
		{in: "etcd://a:port", bad: true},
		{in: "etcd://:2379", bad: true},
		{in: "etcd://::1", bad: true},
		{in: "etcd://[zz]", bad: true},
		{in: "etcd://a:1?x=y", bad: true},
		{in: "etcd://user@a:1", bad: true},
		{in: "etcd://a:1//x", bad: true},
		{in: "etcd://a :1", bad: true},
		{in: "etcds://?ca=/c", bad: true},
		{in: "etcd://a:1#x", bad: true},
	}
	for _, tt := range tests {
		ep, err := ParseEndpoints(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseEndpoints(%q) = %+v, want an error", tt.in, ep)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseEndpoints(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(ep.Addrs, tt.addrs) || ep.Prefix != tt.prefix {
			t.Errorf("ParseEndpoints(%q) = %+v, want %v %q", tt.in, ep, tt.addrs, tt.prefix)
		}
		again, err := ParseEndpoints(ep.String())
		if err != nil || !reflect.DeepEqual(again, ep) {
			t.Errorf("ParseEndpoints(%q.String() = %q) = %+v, %v", tt.in, ep.String(), again, err)
		}
	}
}

// TestParseEndpointsQuery pins what each query key sets and the exact form
// String writes back.
func TestParseEndpointsQuery(t *testing.T) {
	tests := []struct {
		in, str string
		want    Endpoints
	}{{
		in:   "etcds://a:1",
		str:  "etcds://a:1",
		want: Endpoints{Addrs: []string{"a:1"}, Prefix: DefaultPrefix, TLS: true},
	}, {
		in:  "ETCDS://a:1,b/prod?server-name=etcd.internal&key=/etc/bk/client-key.pem&cert=/etc/bk/client.pem&ca=/etc/bk/ca.pem",
		str: "etcds://a:1,b:2379/prod?ca=/etc/bk/ca.pem&cert=/etc/bk/client.pem&key=/etc/bk/client-key.pem&server-name=etcd.internal",
		want: Endpoints{Addrs: []string{"a:1", "b:2379"}, Prefix: "/prod", TLS: true,
			CAFile: "/etc/bk/ca.pem", CertFile: "/etc/bk/client.pem", KeyFile: "/etc/bk/client-key.pem", ServerName: "etcd.internal"},
	}, {
		in:   "etcd://a:1?user=bk",
		str:  "etcd://a:1?user=bk",
		want: Endpoints{Addrs: []string{"a:1"}, Prefix: DefaultPrefix, User: "bk"},
	}, {
		in:   "etcds://a:1?password-file=/run/secrets/etcd&user=bk&ca=ca.pem",
		str:  "etcds://a:1?ca=ca.pem&user=bk&password-file=/run/secrets/etcd",
		want: Endpoints{Addrs: []string{"a:1"}, Prefix: DefaultPrefix, TLS: true, CAFile: "ca.pem", User: "bk", PasswordFile: "/run/secrets/etcd"},
	}, {
		// Percent escapes are decoded, '+' is not a space, and String
		// escapes only what would not read back.
		in:   "etcds://a:1?ca=/my%20certs/c++%26%3D%25.pem&user=b%C3%B6b",
		str:  "etcds://a:1?ca=/my%20certs/c++%26%3D%25.pem&user=b%C3%B6b",
		want: Endpoints{Addrs: []string{"a:1"}, Prefix: DefaultPrefix, TLS: true, CAFile: "/my certs/c++&=%.pem", User: "böb"},
	}}
	for _, tt := range tests {
		ep, err := ParseEndpoints(tt.in)
		if err != nil {
			t.Errorf("ParseEndpoints(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(ep, tt.want) {
			t.Errorf("ParseEndpoints(%q) = %+v, want %+v", tt.in, ep, tt.want)
		}
		if got := ep.String(); got != tt.str {
			t.Errorf("ParseEndpoints(%q).String() = %q, want %q", tt.in, got, tt.str)
		}
	}
}

// TestParseEndpointsErrors pins the message for each mistake an operator
// makes, and that a password put in the endpoint is not repeated in it.
func TestParseEndpointsErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"etcds://a:1?ca=/c&ca=/d", `parameter "ca" given twice`},
		{"etcds://a:1?ca=", `parameter "ca": empty value`},
		{"etcds://a:1?ca", `parameter "ca": empty value`},
		{"etcds://a:1?", "empty query"},
		{"etcds://a:1?ca=%zz", `parameter "ca": bad escape`},
		{"etcds://a:1?cafile=/c", `unknown parameter "cafile" (known: ca, cert, key, server-name, user, password-file)`},
		{"etcds://a:1?cert=/c.pem", "cert needs key"},
		{"etcds://a:1?key=/k.pem", "key needs cert"},
		{"etcd://a:1?ca=/c", `parameter "ca" needs TLS: use etcds://`},
		{"etcd://a:1?server-name=x", `parameter "server-name" needs TLS: use etcds://`},
		{"etcd://a:1?password-file=/p", "password-file needs user"},
		{"etcd://a:1?user=bk&password=hunter2", "a password does not go in the endpoint: use password-file=PATH or $BK_ETCD_PASSWORD"},
		{"etcd://a:1?user=bk&PASSWORD=hunter2", "a password does not go in the endpoint"},
		{"etcd://bk:hunter2@a:1/p", "user info is not allowed: give the user as ?user=NAME"},
		{"https://a:1", `unsupported scheme "https", only etcd:// and etcds:// (TLS) are supported`},
	}
	for _, tt := range tests {
		_, err := ParseEndpoints(tt.in)
		if err == nil {
			t.Errorf("ParseEndpoints(%q) succeeded, want %q", tt.in, tt.want)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.want) || strings.Contains(msg, "hunter2") || strings.Contains(msg, "\n") {
			t.Errorf("ParseEndpoints(%q) = %q, want one line with %q and no password", tt.in, msg, tt.want)
		}
	}
}

// TestClientConfigFiles checks the files an endpoint names are read, and
// that each way a file can be of no use is reported naming it.
func TestClientConfigFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := file("not.pem", "hello\n")
	pw := file("pw", "pa ss\r\n")
	empty := file("empty", "\n")
	missing := filepath.Join(dir, "missing.pem")
	t.Setenv(PasswordEnv, "")

	ep, err := ParseEndpoints("etcd://a:1?user=bk&password-file=" + pw)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ep.ClientConfig()
	if err != nil || cfg.Username != "bk" || cfg.Password != "pa ss" || cfg.TLS != nil {
		t.Fatalf("ClientConfig = user %q password %q TLS %v, %v; want bk, \"pa ss\", no TLS", cfg.Username, cfg.Password, cfg.TLS, err)
	}
	ep, _ = ParseEndpoints("etcds://a:1")
	if cfg, err := ep.ClientConfig(); err != nil || cfg.TLS == nil || cfg.TLS.RootCAs != nil || cfg.Username != "" {
		t.Fatalf("etcds:// without query: TLS %+v, user %q, %v; want TLS with the system roots", cfg.TLS, cfg.Username, err)
	}

	tests := []struct{ endpoint, want string }{
		{"etcds://a:1?ca=" + missing, "meta: etcd CA file: open " + missing + ": no such file or directory"},
		{"etcds://a:1?ca=" + dir, "meta: etcd CA file: read " + dir + ": is a directory"},
		{"etcds://a:1?ca=" + notPEM, "meta: etcd CA file " + notPEM + ": no PEM certificate in it"},
		{"etcds://a:1?cert=" + missing + "&key=" + notPEM, "meta: etcd client certificate " + missing + ", key " + notPEM + ": open " + missing},
		{"etcds://a:1?cert=" + notPEM + "&key=" + notPEM, "meta: etcd client certificate " + notPEM + ", key " + notPEM + ": tls: failed to find any PEM data"},
		{"etcd://a:1?user=bk&password-file=" + missing, "meta: etcd password file: open " + missing},
		{"etcd://a:1?user=bk&password-file=" + empty, "meta: etcd password file " + empty + " is empty"},
		{"etcd://a:1?user=bk", `meta: etcd user "bk" has no password: add password-file=PATH to the endpoint or set $BK_ETCD_PASSWORD`},
	}
	for _, tt := range tests {
		ep, err := ParseEndpoints(tt.endpoint)
		if err != nil {
			t.Errorf("ParseEndpoints(%q): %v", tt.endpoint, err)
			continue
		}
		_, err = ep.ClientConfig()
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ClientConfig(%q) = %v, want one line starting %q", tt.endpoint, err, tt.want)
		}
	}

	t.Setenv(PasswordEnv, "from env")
	ep, _ = ParseEndpoints("etcd://a:1?user=bk")
	if cfg, err := ep.ClientConfig(); err != nil || cfg.Password != "from env" {
		t.Fatalf("ClientConfig with $%s = password %q, %v", PasswordEnv, cfg.Password, err)
	}
	ep, _ = ParseEndpoints("etcd://a:1?user=bk&password-file=" + pw)
	if cfg, err := ep.ClientConfig(); err != nil || cfg.Password != "pa ss" {
		t.Fatalf("password-file and $%s: password %q, %v; want the file's", PasswordEnv, cfg.Password, err)
	}
}

// FuzzParseEndpoints checks that ParseEndpoints never panics, and that
// whatever it accepts String writes in a form that parses back to the same
// endpoint and is its own String: a bookie's config printed and read back
// names the same store.
func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{
		"etcd://127.0.0.1:2379",
		"etcd://a:1,b:2,c:3/team/bk/",
		"etcd://[::1]:2379,[fe80::1]",
		"etcds://a:1,b/prod?server-name=etcd.internal&key=/k.pem&cert=/c.pem&ca=/ca.pem",
		"etcds://a:1?ca=/my%20certs/c++%26%3D%25.pem&user=b%C3%B6b&password-file=p",
		"etcd://a:1?user=bk&password=x",
		"etcd://u:p@a:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ep, err := ParseEndpoints(s)
		if err != nil {
			return
		}
		str := ep.String()
		again, err := ParseEndpoints(str)
		if err != nil {
			t.Fatalf("ParseEndpoints(%q) = %+v, whose String %q does not parse: %v", s, ep, str, err)
		}
		if !reflect.DeepEqual(again, ep) {
			t.Fatalf("ParseEndpoints(%q) = %+v, String %q parses to %+v", s, ep, str, again)
		}
		if again.String() != str {
			t.Fatalf("String not stable: %q then %q", str, again.String())
		}
	})
}
