package entrylog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// Writers, readers, flushes, compactions and deletes all at once; run with
// -race. Each writer owns a ledger; readers check every entry they can see.
func TestConcurrentUse(t *testing.T) {
	opts := smallOpts()
	opts.MinorCompactionInterval, opts.MajorCompactionInterval = time.Millisecond, 3*time.Millisecond
	opts.FlushRetryDelay = time.Millisecond
	s := mustOpen(t, vfs.NewMemFS(), opts)
	defer s.close(t)

	const writers, perWriter = 3, 300
	var wg sync.WaitGroup
	var written [writers]int64 // entries of ledger w+1 acknowledged, guarded by mu
	var mu sync.Mutex
	stop := make(chan struct{})
	errc := make(chan error, 16)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := uint64(w + 1)
			for e := int64(0); e < perWriter; e++ {
				d := payload(l, e, 200+int(e%7)*100)
				for {
					err := s.Put(l, e, d)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrCacheFull) {
						fail(err)
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
				mu.Lock()
				written[w] = e + 1
				mu.Unlock()
			}
		}()
	}
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var buf []byte
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w := (i + r) % writers
				mu.Lock()
				n := written[w]
				mu.Unlock()
				if n == 0 {
					continue
				}
				e := int64(i*7919) % n
				l := uint64(w + 1)
				var err error
				buf, err = s.Get(l, e, buf[:0])
				if err != nil {
					fail(err)
					return
				}
				if string(buf) != string(payload(l, e, 200+int(e%7)*100)) {
					fail(errors.New("wrong bytes"))
					return
				}
				if last, err := s.LastEntry(l); err != nil || last < e {
					fail(errors.Join(errors.New("LastEntry behind an entry read"), err))
					return
				}
			}
		}()
	}
	// A churn ledger, deleted and compacted away repeatedly.
	readers.Add(1)
	go func() {
		defer readers.Done()
		for i := int64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Put(100, i%50, payload(100, i, 500)); err != nil && !errors.Is(err, ErrCacheFull) {
				fail(err)
				return
			}
			if i%40 == 39 {
				if err := s.DeleteLedger(100); err != nil {
					fail(err)
					return
				}
				if err := s.Flush(); err != nil {
					fail(err)
					return
				}
				if _, err := s.Compact(context.Background()); err != nil {
					fail(err)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		for e := int64(0); e < perWriter; e++ {
			mustGet(t, s, uint64(w+1), e, payload(uint64(w+1), e, 200+int(e%7)*100))
		}
	}
}
