package inspect

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/wire"
)

// The fixture is a data directory built by a real bookie, once per test
// binary: ledger 1 (entries 0..fixtureEntries-1) was written and the bookie
// closed, so it lives in the entry logs and the index; then, after a
// restart, ledger 2 got fixtureEntries entries, an explicit LAC and a fence,
// and the directory was copied while that bookie was still running (a crash
// image), so ledger 2 lives only in the journal, after the checkpoint mark.
const fixtureEntries = 40

var fixtureDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "inspect-fixture-")
	if err != nil {
		panic(err)
	}
	if err := buildFixture(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building the fixture:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	fixtureDir = filepath.Join(dir, "crashed")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var fixtureKey = wire.MasterKeyFromPassword([]byte("inspect"))

func fixturePayload(ledger uint64, entry int64) []byte {
	return fmt.Appendf(nil, "ledger %d entry %d %0200d", ledger, entry, entry)
}

// fixtureConfig is the small bookie the fixtures are written by.
func fixtureConfig(data string) bookie.Config {
	return bookie.Config{
		Listen:             "127.0.0.1:0",
		DataDir:            data,
		Admin:              "",
		EventLoops:         1,
		JournalSegmentSize: 1 << 20,
		WriteCacheBytes:    1 << 20,
		EntryLogSize:       1 << 20,
		IndexCacheBytes:    1 << 20,
		CheckpointInterval: bookie.Duration(time.Hour),
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func buildFixture(dir string) error {
	data := filepath.Join(dir, "live")
	cfg := fixtureConfig(data)
	b, err := bookie.New(cfg)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	c, err := dialRaw(b.Addr())
	if err != nil {
		b.Close()
		return err
	}
	for e := range int64(fixtureEntries) {
		if err := c.add(1, e, e-1, fixturePayload(1, e)); err != nil {
			b.Close()
			return err
		}
	}
	c.nc.Close()
	if err := b.Close(); err != nil {
		return err
	}

	if b, err = bookie.New(cfg); err != nil {
		return err
	}
	defer b.Close()
	if err := b.Start(); err != nil {
		return err
	}
	if c, err = dialRaw(b.Addr()); err != nil {
		return err
	}
	defer c.nc.Close()
	for e := range int64(fixtureEntries) {
		if err := c.add(2, e, e-1, fixturePayload(2, e)); err != nil {
			return err
		}
	}
	if _, err := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendWriteLACRequest(dst, id, 2, fixtureEntries-1, &fixtureKey)
	}); err != nil {
		return err
	}
	f, err := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendReadLACRequest(dst, id, wire.FlagFence, 2, &fixtureKey)
	})
	if err != nil {
		return err
	}
	if r, err := wire.DecodeReadLACResponse(f); err != nil || r.Status != wire.StatusOK {
		return fmt.Errorf("fencing read LAC: %+v, %v", r, err)
	}
	return os.CopyFS(filepath.Join(dir, "crashed"), os.DirFS(data))
}

// rawClient speaks the protocol synchronously over one connection.
type rawClient struct {
	nc   net.Conn
	next uint64
}

func dialRaw(addr string) (*rawClient, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	c := &rawClient{nc: nc}
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1})); err != nil {
		return nil, err
	}
	f, err := c.readFrame()
	if err != nil {
		return nil, err
	}
	if h, err := wire.DecodeHello(f); err != nil || h.Status != wire.StatusOK {
		return nil, fmt.Errorf("hello: %+v, %v", h, err)
	}
	return c, nil
}

func (c *rawClient) readFrame() ([]byte, error) {
	var pre [4]byte
	if _, err := io.ReadFull(c.nc, pre[:]); err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(pre[:], 0)
	if err != nil {
		return nil, err
	}
	f := make([]byte, n)
	copy(f, pre[:])
	_, err = io.ReadFull(c.nc, f[4:])
	return f, err
}

func (c *rawClient) call(enc func(dst []byte, id uint64) []byte) ([]byte, error) {
	c.next++
	if _, err := c.nc.Write(enc(nil, c.next)); err != nil {
		return nil, err
	}
	return c.readFrame()
}

func (c *rawClient) add(ledger uint64, entry, lac int64, payload []byte) error {
	f, err := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAddRequest(dst, id, 0, &fixtureKey, wire.AppendEntry(nil, ledger, entry, lac, payload))
	})
	if err != nil {
		return err
	}
	r, err := wire.DecodeAddResponse(f)
	if err != nil || r.Status != wire.StatusOK {
		return fmt.Errorf("add %d/%d: %+v, %v", ledger, entry, r, err)
	}
	return nil
}

// copyFixture returns a private copy of the fixture's data directory.
func copyFixture(t *testing.T) Dirs {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dst, os.DirFS(fixtureDir)); err != nil {
		t.Fatal(err)
	}
	return DirsFor(dst, "", "")
}
