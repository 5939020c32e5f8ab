package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/bookie-go/bookie/bench"
	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client/autorecovery"
)

// rereplFlags are the flags of bk bench --workload rereplication.
type rereplFlags struct {
	bytes    *int64
	entry    *int
	fgFor    *time.Duration
	rate     *int64
	bookies  *int
	workers  *int
	ledgers  *int
	fgEntry  *int
	keepData *bool
}

func addRereplFlags(fs *flag.FlagSet) *rereplFlags {
	return &rereplFlags{
		bytes:   fs.Int64("rerepl-bytes", 64<<20, "rereplication: payload bytes written before a bookie is lost (1 GiB for the issue's figure)"),
		entry:   fs.Int("rerepl-entry", 16<<10, "rereplication: entry size of the ledgers written first"),
		ledgers: fs.Int("rerepl-ledgers", 16, "rereplication: ledgers the bytes are spread over (E=3, WQ=2, AQ=2)"),
		fgFor: fs.Duration("rerepl-foreground", 2*time.Duration(bookie.DefaultConfig().CheckpointInterval),
			"rereplication: how long the foreground writer is measured without re-replication (default two checkpoint intervals: a shorter baseline that starts after a checkpoint holds none, and is quieter than the cluster ever is while it copies)"),
		fgEntry:  fs.Int("rerepl-foreground-entry", 1024, "rereplication: foreground add size"),
		rate:     fs.Int64("rerepl-rate", autorecovery.DefaultRateBytes, "rereplication: the workers' copy rate limit, bytes/s (negative: unlimited)"),
		workers:  fs.Int("rerepl-workers", 1, "rereplication: autorecovery workers (sharing --rerepl-rate, as workers beside every bookie do)"),
		bookies:  fs.Int("rerepl-bookies", 5, "rereplication: bookies of the local cluster"),
		keepData: fs.Bool("rerepl-keep", false, "rereplication: keep the cluster directory"),
	}
}

// options returns the workload's options from the flags.
func (f *rereplFlags) options() bench.RereplOptions {
	return bench.RereplOptions{Bytes: *f.bytes, Entry: *f.entry, Ledgers: *f.ledgers, Foreground: *f.fgFor,
		ForegroundEntry: *f.fgEntry, Rate: *f.rate, Workers: *f.workers, Bookies: *f.bookies, Keep: *f.keepData}
}

// runBenchRerepl runs bk bench --workload rereplication (bench.RunRereplication) in a
// directory under parent and prints what it measured to out.
func runBenchRerepl(ctx context.Context, f *rereplFlags, parent string, out io.Writer) error {
	res, err := bench.RunRereplication(ctx, parent, f.options(), out)
	if err != nil {
		return err
	}
	bench.WriteRereplication(out, &res)
	return nil
}
