package bench

import (
	"math"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: latencies are recorded in nanoseconds from 1 us to 100 s
// with 3 significant digits (0.1% resolution).
const (
	histMin    = int64(time.Microsecond)
	histMax    = int64(100 * time.Second)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// Summary is the distribution of a set of latencies.
type Summary struct {
	Count int64
	Mean  time.Duration
	P50   time.Duration
	P95   time.Duration
	P99   time.Duration
	P999  time.Duration
	Max   time.Duration
}

// summarize reads h's percentiles. Values below the histogram's range were
// clamped to it when recorded.
func summarize(h *hdrhistogram.Histogram) Summary {
	if h.TotalCount() == 0 {
		return Summary{}
	}
	q := h.ValueAtPercentiles([]float64{50, 95, 99, 99.9})
	return Summary{
		Count: h.TotalCount(),
		Mean:  time.Duration(h.Mean()),
		P50:   time.Duration(q[50]),
		P95:   time.Duration(q[95]),
		P99:   time.Duration(q[99]),
		P999:  time.Duration(q[99.9]),
		Max:   time.Duration(h.Max()),
	}
}

// Recorder collects latencies from concurrent callbacks into a histogram for
// the whole run and one for the current window (the timeline and the live
// progress line read and reset it). Safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex // protects everything below
	total  *hdrhistogram.Histogram
	window *hdrhistogram.Histogram
	errors int64
	bytes  int64
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{total: newHist(), window: newHist()} }

// clamp keeps v inside the histogram's trackable range, so an outlier is
// counted at the range's edge instead of being dropped.
func clamp(v int64) int64 { return min(max(v, histMin), histMax) }

// Record adds one successful add of size payload bytes that took d.
func (r *Recorder) Record(d time.Duration, size int) {
	v := clamp(int64(d))
	r.mu.Lock()
	r.total.RecordValue(v)
	r.window.RecordValue(v)
	r.bytes += int64(size)
	r.mu.Unlock()
}

// Error counts one failed add.
func (r *Recorder) Error() {
	r.mu.Lock()
	r.errors++
	r.mu.Unlock()
}

// Window returns the summary of the latencies recorded since the previous
// call (or Reset) and starts a new window.
func (r *Recorder) Window() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := summarize(r.window)
	r.window.Reset()
	return s
}

// Reset forgets everything recorded (the end of a warm-up).
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.Reset()
	r.window.Reset()
	r.errors, r.bytes = 0, 0
}

// Total returns the summary of every latency since Reset, the payload bytes
// of those adds, and the number of failed adds.
func (r *Recorder) Total() (s Summary, bytes, errors int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(r.total), r.bytes, r.errors
}

// spectrum returns the latency at each percentile of the run's distribution,
// for the percentile plot: 0, 50, 75, 87.5, ... up to 99.999 (or as far as
// the count resolves).
func (r *Recorder) spectrum() []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.total.TotalCount()
	if n == 0 {
		return nil
	}
	var pts []Point
	for _, p := range spectrumPercentiles(n) {
		pts = append(pts, Point{X: p, Y: float64(r.total.ValueAtPercentile(p)) / 1e3})
	}
	return pts
}

// spectrumPercentiles returns percentiles 1-10^(-k/4) for k = 0, 1, ... as
// long as at least one sample lies beyond them, then 100.
func spectrumPercentiles(n int64) []float64 {
	var ps []float64
	for k := 0; ; k++ {
		tail := math.Pow(10, -float64(k)/4) // fraction of samples above the percentile
		if tail*float64(n) < 1 || k > 40 {
			break
		}
		ps = append(ps, 100*(1-tail))
	}
	return append(ps, 100)
}
