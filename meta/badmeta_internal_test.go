package meta

import (
	"fmt"
	"math"
	"testing"
)

// TestIDAtOrBefore: the cursor ListLedgers continues after is the largest
// id whose key sorts at or before the key read, so that a key outside the
// layout is passed and never read again.
func TestIDAtOrBefore(t *testing.T) {
	pad := func(id uint64) string { return fmt.Sprintf("%020d", id) }
	tests := []struct {
		suffix string
		want   uint64
	}{
		{pad(42), 42},
		{pad(42) + "x", 42},
		{pad(42) + "/", 42},
		{pad(math.MaxUint64), math.MaxUint64},
		{"99999999999999999999", math.MaxUint64},
		{"zzz", math.MaxUint64},
		{"0000000000000000004", 39},  // 19 digits: after ...0039, before ...0040
		{"0000000000000000004/", 39}, // '/' sorts below '0'
		{"0000000000000000004x", 49}, // 'x' sorts above '9'
		{"1", 9999999999999999999},
		{"", 0},
	}
	for _, tt := range tests {
		got := idAtOrBefore(tt.suffix)
		if got != tt.want {
			t.Errorf("idAtOrBefore(%q) = %d, want %d", tt.suffix, got, tt.want)
		}
		// The definition: the key of the result sorts at or before suffix,
		// the next id's after it.
		if tt.suffix != "" && (pad(got) > tt.suffix || got < math.MaxUint64 && pad(got+1) <= tt.suffix) {
			t.Errorf("idAtOrBefore(%q) = %d breaks the definition", tt.suffix, got)
		}
	}
}
