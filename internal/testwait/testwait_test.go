package testwait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct{ msg string }

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestForReturnsOnceTrue(t *testing.T) {
	n := 0
	var tb fakeTB
	For(&tb, time.Minute, "third call", func() bool { n++; return n == 3 })
	if tb.msg != "" || n != 3 {
		t.Fatalf("after %d calls: %q, want 3 calls and no failure", n, tb.msg)
	}
}

func TestForFailsWithWhat(t *testing.T) {
	var tb fakeTB
	For(&tb, 20*time.Millisecond, "the impossible", func() bool { return false })
	if !strings.Contains(tb.msg, "the impossible: not reached in 20ms") {
		t.Fatalf("failure %q", tb.msg)
	}
}

func TestUntilReportsLastError(t *testing.T) {
	var tb fakeTB
	Until(&tb, 20*time.Millisecond, "a reply", func() error { return errors.New("refused") })
	if !strings.Contains(tb.msg, "a reply") || !strings.Contains(tb.msg, "refused") {
		t.Fatalf("failure %q", tb.msg)
	}
}

func TestPollHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Poll(ctx, 0, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll = %v, want context.Canceled", err)
	}
}

func TestThroughout(t *testing.T) {
	n := 0
	var tb fakeTB
	Throughout(&tb, 100*time.Millisecond, "always", func() error { n++; return nil })
	if tb.msg != "" || n < 2 {
		t.Fatalf("held %d times, failure %q; want at least 2 checks and no failure", n, tb.msg)
	}
	Throughout(&tb, time.Minute, "flapping", func() error { return errors.New("flapped") })
	if !strings.Contains(tb.msg, "flapping: stopped holding") || !strings.Contains(tb.msg, "flapped") {
		t.Fatalf("failure %q", tb.msg)
	}
}
