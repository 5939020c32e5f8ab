package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// Defaults of the Config fields that have one: what a zero field stands for.
const (
	defaultDialTimeout           = 3 * time.Second
	defaultRequestTimeout        = 5 * time.Second
	defaultMinBackoff            = 50 * time.Millisecond
	defaultMaxBackoff            = 2 * time.Second
	defaultEnsembleChangeTimeout = 30 * time.Second
	defaultMaxPendingAdds        = 65536
	defaultMaxPendingBytes       = 64 << 20
	defaultSpeculativeTimeout    = 200 * time.Millisecond
	defaultQuarantineTime        = 30 * time.Second
	defaultMetadataTimeout       = 10 * time.Second
)

// DefaultConfig returns the configuration a zero Config stands for, with every field that
// has a default set to it: a starting point to print or adjust. Metadata (or Store) is left
// for the caller to set; New(ctx, cfg) with Metadata set on DefaultConfig() runs exactly
// as New with only Metadata set.
func DefaultConfig() Config { return Config{}.withDefaults() }

// withDefaults returns cfg with each zero field that has a default set to it. Negative
// values that mean "none" (AppendWait, EnsembleChangeTimeout, SpeculativeTimeout,
// QuarantineTime, MetadataTimeout) are kept; New reads them.
func (cfg Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.DialTimeout, defaultDialTimeout)
	def(&cfg.RequestTimeout, defaultRequestTimeout)
	def(&cfg.MinBackoff, defaultMinBackoff)
	def(&cfg.MaxBackoff, defaultMaxBackoff)
	def(&cfg.EnsembleChangeTimeout, defaultEnsembleChangeTimeout)
	def(&cfg.AppendWait, cfg.RequestTimeout)
	def(&cfg.SpeculativeTimeout, defaultSpeculativeTimeout)
	def(&cfg.QuarantineTime, defaultQuarantineTime)
	def(&cfg.MetadataTimeout, defaultMetadataTimeout)
	if cfg.MaxPendingAdds == 0 {
		cfg.MaxPendingAdds = defaultMaxPendingAdds
	}
	if cfg.MaxPendingBytes == 0 {
		cfg.MaxPendingBytes = defaultMaxPendingBytes
	}
	return cfg
}

// Validate reports every setting of cfg that New refuses, each with what is wrong and what
// to set instead, joined (errors.Is(err, ErrInvalidConfig) holds); nil if there is none.
// Zero fields take their defaults and are valid. It checks that a metadata store is named
// (Metadata parses, see meta.ParseEndpoints) or given (Store); that the timeouts and
// backoffs that have no "none" meaning are not negative and MinBackoff is not above
// MaxBackoff; that the pending bounds are not negative; and that the rack policy is
// coherent (MinRacks not negative, EnforceRacks only with MinRacks). It reads no file and
// touches no network.
func (cfg Config) Validate() error {
	eff := cfg.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if cfg.Store == nil {
		if cfg.Metadata == "" {
			bad("Metadata is empty and Store is nil: name the metadata store (etcd://host:port[/prefix]) or pass an open one")
		} else if _, err := meta.ParseEndpoints(cfg.Metadata); err != nil {
			errs = append(errs, fmt.Errorf("%w: Metadata: %w", ErrInvalidConfig, err))
		}
	}
	for _, d := range []struct {
		name     string
		value    time.Duration
		fallback time.Duration
	}{
		{"DialTimeout", cfg.DialTimeout, defaultDialTimeout},
		{"RequestTimeout", cfg.RequestTimeout, defaultRequestTimeout},
		{"MinBackoff", cfg.MinBackoff, defaultMinBackoff},
		{"MaxBackoff", cfg.MaxBackoff, defaultMaxBackoff},
	} {
		if d.value < 0 {
			bad("%s %v is negative: set 0 for the default (%v) or a positive duration", d.name, d.value, d.fallback)
		}
	}
	if eff.MinBackoff > 0 && eff.MaxBackoff > 0 && eff.MinBackoff > eff.MaxBackoff {
		bad("MinBackoff %v is above MaxBackoff %v: the wait doubles from MinBackoff up to MaxBackoff", eff.MinBackoff, eff.MaxBackoff)
	}
	if cfg.MaxPendingAdds < 0 {
		bad("MaxPendingAdds %d is negative: set 0 for the default (%d) or a positive bound", cfg.MaxPendingAdds, defaultMaxPendingAdds)
	}
	if cfg.MaxPendingBytes < 0 {
		bad("MaxPendingBytes %d is negative: set 0 for the default (%d) or a positive bound", cfg.MaxPendingBytes, defaultMaxPendingBytes)
	}
	if cfg.MinRacks < 0 {
		bad("MinRacks %d is negative: set 0 to ignore racks or the number of racks each write set should span", cfg.MinRacks)
	}
	if cfg.EnforceRacks && cfg.MinRacks <= 0 {
		bad("EnforceRacks is set without MinRacks: there is no rack count to enforce; set MinRacks too")
	}
	return errors.Join(errs...)
}

// ErrInvalidConfig is returned by Config.Validate, and so by New, for a setting New
// refuses; the message says which and why.
var ErrInvalidConfig = errors.New("client: invalid config")
