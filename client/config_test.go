package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// unusedStore is a metadata store New may hold but the test never uses: every method
// panics (the embedded interface is nil).
type unusedStore struct{ meta.Store }

// newOffline opens a Client on unusedStore: New needs no network for it.
func newOffline(t *testing.T, cfg Config) *Client {
	t.Helper()
	cfg.Store = unusedStore{}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDefaultConfigIsWhatZeroStandsFor: DefaultConfig spells out the documented defaults,
// and a Client made from it runs with the same settings as one made from a zero Config.
func TestDefaultConfigIsWhatZeroStandsFor(t *testing.T) {
	d := DefaultConfig()
	for _, f := range []struct {
		name      string
		got, want time.Duration
	}{
		{"DialTimeout", d.DialTimeout, 3 * time.Second},
		{"RequestTimeout", d.RequestTimeout, 5 * time.Second},
		{"MinBackoff", d.MinBackoff, 50 * time.Millisecond},
		{"MaxBackoff", d.MaxBackoff, 2 * time.Second},
		{"EnsembleChangeTimeout", d.EnsembleChangeTimeout, 30 * time.Second},
		{"AppendWait", d.AppendWait, 5 * time.Second},
		{"SpeculativeTimeout", d.SpeculativeTimeout, 200 * time.Millisecond},
		{"QuarantineTime", d.QuarantineTime, 30 * time.Second},
		{"MetadataTimeout", d.MetadataTimeout, 10 * time.Second},
	} {
		if f.got != f.want {
			t.Errorf("DefaultConfig().%s = %v, want %v", f.name, f.got, f.want)
		}
	}
	if d.MaxPendingAdds != 65536 || d.MaxPendingBytes != 64<<20 {
		t.Errorf("DefaultConfig() pending bounds %d entries, %d bytes; want 65536, 64 MiB", d.MaxPendingAdds, d.MaxPendingBytes)
	}
	if err := (Config{Metadata: "etcd://127.0.0.1:2379"}).Validate(); err != nil {
		t.Errorf("a Config with only Metadata: %v", err)
	}

	zero, def := newOffline(t, Config{}), newOffline(t, d)
	type settings struct {
		dial, request, minBackoff, maxBackoff, change, spec, quarantine, meta, appendWait time.Duration
		adds                                                                              int
		bytes, window                                                                     int64
	}
	of := func(c *Client) settings {
		return settings{c.cfg.dialTimeout, c.cfg.requestTimeout, c.cfg.minBackoff, c.cfg.maxBackoff, c.cfg.changeTimeout,
			c.cfg.speculativeTimeout, c.quarantineTime, c.metaTimeout, c.appendWait, c.maxPendingAdds, c.maxPendingBytes, c.copyWindow}
	}
	if of(zero) != of(def) {
		t.Errorf("a Client from a zero Config runs with %+v, one from DefaultConfig() with %+v", of(zero), of(def))
	}
}

// TestNegativeMeansNone: the fields whose documentation gives a negative value a meaning
// keep it; EnsembleChangeTimeout < 0 makes the writer wait for a replacement forever (its
// check runs only for a positive bound), rather than taking the 30 s default.
func TestNegativeMeansNone(t *testing.T) {
	c := newOffline(t, Config{EnsembleChangeTimeout: -1, QuarantineTime: -1, MetadataTimeout: -1, SpeculativeTimeout: -1, AppendWait: -1})
	if c.cfg.changeTimeout != 0 {
		t.Errorf("EnsembleChangeTimeout -1: the writer gives up after %v, want never (0)", c.cfg.changeTimeout)
	}
	if c.quarantineTime != 0 || c.metaTimeout != 0 {
		t.Errorf("QuarantineTime, MetadataTimeout -1: %v, %v; want 0 (none)", c.quarantineTime, c.metaTimeout)
	}
	if c.cfg.speculativeTimeout >= 0 || c.appendWait >= 0 {
		t.Errorf("SpeculativeTimeout, AppendWait -1: %v, %v; want negative (disabled, fail at once)", c.cfg.speculativeTimeout, c.appendWait)
	}
}

// TestValidateExplainsEachViolation: every setting New refuses is reported with what to
// set instead, all of them at once, and New returns that error without opening anything.
func TestValidateExplainsEachViolation(t *testing.T) {
	store := unusedStore{}
	for _, tt := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"no store", Config{}, []string{"Metadata is empty and Store is nil"}},
		{"bad endpoint", Config{Metadata: "127.0.0.1:2379"}, []string{"Metadata: ", "want etcd://host:port"}},
		{"negative timeouts", Config{Store: store, DialTimeout: -1, RequestTimeout: -time.Second},
			[]string{"DialTimeout -1ns is negative: set 0 for the default (3s)", "RequestTimeout -1s is negative: set 0 for the default (5s)"}},
		{"negative backoff", Config{Store: store, MinBackoff: -1, MaxBackoff: -1}, []string{"MinBackoff -1ns is negative", "MaxBackoff -1ns is negative"}},
		{"backoffs crossed", Config{Store: store, MinBackoff: 3 * time.Second}, []string{"MinBackoff 3s is above MaxBackoff 2s"}},
		{"negative bounds", Config{Store: store, MaxPendingAdds: -1, MaxPendingBytes: -1},
			[]string{"MaxPendingAdds -1 is negative", "MaxPendingBytes -1 is negative"}},
		{"negative racks", Config{Store: store, MinRacks: -2}, []string{"MinRacks -2 is negative"}},
		{"enforce without racks", Config{Store: store, EnforceRacks: true}, []string{"EnforceRacks is set without MinRacks"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %q lacks %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "client: "); n != len(tt.want) && tt.name != "bad endpoint" {
				t.Errorf("Validate: %q names the package %d times for %d problems", err, n, len(tt.want))
			}
			if _, nerr := New(context.Background(), tt.cfg); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New: %v, want Validate's error", nerr)
			}
		})
	}
}
