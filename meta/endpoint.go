package meta

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// DefaultPrefix is the key prefix used when an endpoint names none.
const DefaultPrefix = "/bookie-go"

// DefaultEtcdPort is used for an endpoint host given without a port.
const DefaultEtcdPort = "2379"

// Endpoints is a parsed metadata endpoint: the etcd cluster's client
// addresses and the key prefix under which this cluster's data lives.
type Endpoints struct {
	// Addrs are "host:port" client addresses, in the order given.
	Addrs []string
	// Prefix starts with '/' and does not end with one.
	Prefix string
}

// String formats e in the form ParseEndpoints accepts; the default prefix
// is left out.
func (e Endpoints) String() string {
	s := "etcd://" + strings.Join(e.Addrs, ",")
	if e.Prefix != DefaultPrefix {
		s += e.Prefix
	}
	return s
}

// ParseEndpoints parses a metadata endpoint, the form every --metadata flag
// takes:
//
//	etcd://host:port[,host:port...][/prefix]
//
// Hosts may be names, IPv4 or bracketed IPv6 addresses ("[::1]:2379"); a
// missing port means 2379. The optional path is the key prefix (default
// "/bookie-go"), which lets several clusters share one etcd.
func ParseEndpoints(s string) (Endpoints, error) {
	fail := func(format string, args ...any) (Endpoints, error) {
		return Endpoints{}, fmt.Errorf("meta: metadata endpoint %q: %s", s, fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return fail("want etcd://host:port[,host:port...][/prefix]")
	}
	if !strings.EqualFold(scheme, "etcd") {
		return fail("unsupported scheme %q, only etcd:// is supported", scheme)
	}
	if strings.ContainsAny(rest, "?#@ \t") {
		return fail("query, fragment, user info and spaces are not allowed")
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	ep := Endpoints{Prefix: DefaultPrefix}
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
	return ep, nil
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

// openProbeTimeout bounds Open's first request when ctx has no deadline.
const openProbeTimeout = 10 * time.Second

// Open connects to the metadata store named by endpoint (see
// ParseEndpoints) and checks that it answers: a quorum read within ctx's
// deadline, or 10 s if ctx has none. Close the store when done.
func Open(ctx context.Context, endpoint string) (Store, error) {
	ep, err := ParseEndpoints(endpoint)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   ep.Addrs,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Detect a dead server on an idle connection; leases depend on it.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// Redial a member that went away at most a second apart (gRPC's default
		// backoff grows to 2 minutes): when etcd comes back after an outage,
		// clients and bookies find it within about a second.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("meta: open %s: %w", endpoint, err)
	}
	s := NewEtcdStore(cli, ep.Prefix)
	s.ownsClient = true
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, openProbeTimeout)
		defer cancel()
	}
	if _, err := cli.Get(ctx, s.clusterKey()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("meta: open %s: %w", endpoint, err)
	}
	return s, nil
}
