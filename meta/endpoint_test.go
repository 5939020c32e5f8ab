package meta

import (
	"slices"
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
		if err != nil || !slices.Equal(again.Addrs, ep.Addrs) || again.Prefix != ep.Prefix {
			t.Errorf("ParseEndpoints(%q.String() = %q) = %+v, %v", tt.in, ep.String(), again, err)
		}
	}
}
