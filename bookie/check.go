package bookie

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Effective returns c with every zero field set to its default: the
// configuration New runs with.
func (c Config) Effective() Config { return c.sizedForDisk().withDefaults() }

// Check validates c (with defaults filled in) without touching the data
// directories or the network (it reads the size of the disks that hold them:
// unset sizes scale with it, see sizedForDisk): addresses parse, sizes and
// thresholds are in range, the data disks can hold those sizes, and the
// secret file and the files the metadata endpoint names (TLS
// certificates, etcd password) are readable. It returns every problem found,
// joined.
func (c Config) Check() error {
	c = c.sizedForDisk().withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("bookie: config: "+format, args...)) }
	checkAddr := func(name, addr string, zeroPortOK bool) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			bad("%s %q: %v (want host:port)", name, addr, err)
			return
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || (p == 0 && !zeroPortOK) {
			bad("%s %q: bad port %q", name, addr, port)
		}
		if host == "" && name == "advertise" {
			bad("advertise %q: needs a host clients can dial", addr)
		}
	}
	checkAddr("listen", c.Listen, true)
	if c.Advertise != "" {
		checkAddr("advertise", c.Advertise, false)
	} else if host, _, err := net.SplitHostPort(c.Listen); err == nil && c.Metadata != "" {
		// The bookie id is the address clients dial from the registration.
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			bad("listen %q is a wildcard address, which clients cannot dial: set advertise (--advertise) to this bookie's host:port", c.Listen)
		}
	}
	if c.Admin != "" {
		checkAddr("admin", c.Admin, true)
	}
	if c.TLSListen != "" {
		checkAddr("tls_listen", c.TLSListen, true)
		if _, err := c.tlsConfig(); err != nil {
			errs = append(errs, err)
		}
	} else if c.AdminTLS {
		if _, err := c.tlsConfig(); err != nil {
			errs = append(errs, err)
		}
	} else if c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSClientCAFile != "" {
		bad("tls_cert_file, tls_key_file and tls_client_ca_file need tls_listen (--tls-listen) or admin_tls (--admin-tls)")
	}
	if c.AdminTLS && c.Admin == "" {
		bad("admin_tls (--admin-tls) needs an admin listener (admin, --admin)")
	}
	if c.Metadata != "" {
		// ClientConfig reads the TLS and password files the endpoint
		// names, so a bad path fails here, before anything is written.
		if ep, err := meta.ParseEndpoints(c.Metadata); err != nil {
			errs = append(errs, err)
		} else if _, err := ep.ClientConfig(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxFrameSize < 1<<10 || c.MaxFrameSize > wire.MaxFrameSize {
		bad("max_frame_size %d: want 1 KiB to %d", c.MaxFrameSize, wire.MaxFrameSize)
	}
	positive := map[string]int64{
		"max_conn_inflight": int64(c.MaxConnInflight), "max_conn_inflight_bytes": c.MaxConnInflightBytes,
		"max_inflight_bytes": c.MaxInflightBytes, "max_outbound_bytes": int64(c.MaxOutboundBytes),
		"read_workers": int64(c.ReadWorkers), "max_connections": int64(c.MaxConnections),
		"read_batch_workers":     int64(c.ReadBatchWorkers),
		"max_connections_per_ip": int64(c.MaxConnectionsPerIP), "event_loops": int64(c.EventLoops),
		"journal_segment_size": c.JournalSegmentSize, "journal_queue_bytes": c.JournalQueueBytes,
		"write_cache_bytes": c.WriteCacheBytes, "entry_log_size": c.EntryLogSize,
		"index_cache_bytes": c.IndexCacheBytes, "registration_ttl": int64(c.RegistrationTTL),
		"checkpoint_interval": int64(c.CheckpointInterval),
	}
	if wb := c.EntryLogWritebackBytes; wb > 0 && wb < 64<<10 {
		bad("entry_log_writeback_bytes %d: at least 64 KiB (a syscall and a wait per piece), or negative for none", wb)
	}
	if c.MaxUnparsedBytes < 2*int64(c.MaxFrameSize) {
		bad("max_unparsed_bytes %d is smaller than 2 x max_frame_size %d: a largest frame and the start of the next would not fit", c.MaxUnparsedBytes, c.MaxFrameSize)
	}
	for _, k := range sortedKeys(positive) {
		if positive[k] <= 0 {
			bad("%s %d: must be positive", k, positive[k])
		}
	}
	// A journaled entry must be appliable: every limit replay meets, an
	// ADD meets first, so a frame admitted is one storage can take.
	if c.JournalSegmentSize < int64(c.MaxFrameSize) {
		bad("journal_segment_size %d is smaller than max_frame_size %d: a largest entry would not fit a segment", c.JournalSegmentSize, c.MaxFrameSize)
	}
	if c.JournalQueueBytes < int64(c.MaxFrameSize) {
		bad("journal_queue_bytes %d is smaller than max_frame_size %d: a largest entry would never fit the journal queue", c.JournalQueueBytes, c.MaxFrameSize)
	}
	if m := entrylog.MaxEntry(c.WriteCacheBytes, c.EntryLogSize); m < int64(c.MaxFrameSize) {
		bad("write_cache_bytes %d and entry_log_size %d hold entries of at most %d bytes, less than max_frame_size %d: "+
			"a largest entry would be journaled but could not be stored (want write_cache_bytes >= 2 x max_frame_size + 128 "+
			"and entry_log_size >= max_frame_size + 1 KiB)", c.WriteCacheBytes, c.EntryLogSize, max(m, 0), c.MaxFrameSize)
	}
	if len(errs) == 0 {
		// The sizes are valid; see whether the data disks can hold them.
		if err := c.checkDiskRoom(); err != nil {
			errs = append(errs, err)
		}
	}
	if !(0 < c.DiskWritableThreshold && c.DiskWritableThreshold < c.DiskFullThreshold && c.DiskFullThreshold <= 1) {
		bad("want 0 < disk_writable_threshold (%v) < disk_full_threshold (%v) <= 1", c.DiskWritableThreshold, c.DiskFullThreshold)
	}
	if c.Secret == nil && c.SecretFile != "" {
		if _, err := readSecretFile(c.SecretFile); err != nil {
			bad("%w", err)
		}
	}
	return errors.Join(errs...)
}

// CheckListeners binds and at once releases the protocol and admin
// addresses, so that a start that would fail for a port in use or an
// address not on this host fails before New writes anything: New stamps
// the data directories with a cookie naming the bookie id (the address),
// and a corrected address would then be refused as a different bookie.
// A port taken between this check and Start still fails Start.
func (c Config) CheckListeners() error {
	c = c.withDefaults()
	addrs := []struct{ name, addr string }{{"listen", c.Listen}, {"admin", c.Admin}, {"tls_listen", c.TLSListen}}
	for _, a := range addrs {
		if a.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("bookie: %s %s: %w", a.name, a.addr, err)
		}
		ln.Close()
	}
	return nil
}

func sortedKeys(m map[string]int64) []string {
	return slices.Sorted(maps.Keys(m))
}
