package client

import (
	"slices"
	"testing"

	"github.com/bookie-go/bookie/meta"
)

// TestMergeRange pins the fragments a merge of entries [first, end) onto the last ensemble
// leaves: entries outside the range keep their ensemble, adjacent fragments with the same
// ensemble are joined, and FirstEntry stays strictly increasing.
func TestMergeRange(t *testing.T) {
	o := []meta.BookieID{"a", "b", "x"}
	tt := []meta.BookieID{"a", "b", "s"}
	u := []meta.BookieID{"a", "s", "y"}
	f := func(first int64, b []meta.BookieID) meta.Fragment {
		return meta.Fragment{FirstEntry: first, Bookies: b}
	}
	for _, c := range []struct {
		name       string
		in         []meta.Fragment
		first, end int64
		want       []meta.Fragment
	}{
		{"all stragglers", []meta.Fragment{f(0, o), f(50, tt)}, 10, 50, []meta.Fragment{f(0, o), f(10, tt)}},
		{"a prefix", []meta.Fragment{f(0, o), f(50, tt)}, 10, 30, []meta.Fragment{f(0, o), f(10, tt), f(30, o), f(50, tt)}},
		{"the next prefix", []meta.Fragment{f(0, o), f(10, tt), f(30, o), f(50, tt)}, 30, 40, []meta.Fragment{f(0, o), f(10, tt), f(40, o), f(50, tt)}},
		{"the rest", []meta.Fragment{f(0, o), f(10, tt), f(40, o), f(50, tt)}, 40, 50, []meta.Fragment{f(0, o), f(10, tt)}},
		{"from the first entry", []meta.Fragment{f(0, o), f(50, tt)}, 0, 20, []meta.Fragment{f(0, tt), f(20, o), f(50, tt)}},
		{"across fragments", []meta.Fragment{f(0, o), f(20, u), f(50, tt)}, 10, 30, []meta.Fragment{f(0, o), f(10, tt), f(30, u), f(50, tt)}},
		{"across fragments to the last", []meta.Fragment{f(0, o), f(20, u), f(50, tt)}, 10, 50, []meta.Fragment{f(0, o), f(10, tt)}},
	} {
		got := mergeRange(c.in, c.first, c.end, tt)
		if !slices.EqualFunc(got, c.want, func(x, y meta.Fragment) bool {
			return x.FirstEntry == y.FirstEntry && slices.Equal(x.Bookies, y.Bookies)
		}) {
			t.Errorf("%s: mergeRange(%v, %d, %d) = %v, want %v", c.name, c.in, c.first, c.end, got, c.want)
		}
	}
}
