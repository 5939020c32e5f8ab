package diskref

import (
	"testing"
	"time"
)

func TestGroupCommit(t *testing.T) {
	r, err := GroupCommit(t.TempDir(), 1024, 16, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records == 0 || r.Records != 16*r.Syncs || r.Bytes != 1024*r.Records || r.P50 <= 0 || r.P99 < r.P50 {
		t.Fatalf("inconsistent result: %+v", r)
	}
	t.Log(r)
}
