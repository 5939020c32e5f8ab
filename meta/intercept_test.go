package meta_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/bookie-go/bookie/meta"
)

// interceptedStore opens a store on endpoint whose etcd client passes every
// unary request through intercept (the tests' counters and gates).
func interceptedStore(t *testing.T, endpoint string, intercept grpc.UnaryClientInterceptor) *meta.EtcdStore {
	t.Helper()
	ep, err := meta.ParseEndpoints(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ep.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialTimeout = 10 * time.Second
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(intercept))
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return meta.NewEtcdStore(cli, ep.Prefix)
}
