package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// palette holds distinguishable colours for up to 10 curves (Tableau 10);
// further curves reuse them with dashes.
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// svg geometry, in pixels.
const (
	plotW, panelH     = 960, 360
	marginL, marginR  = 70, 250
	marginT, marginB  = 56, 50
	panelGap          = 30
	plotInnerW        = plotW - marginL - marginR
	plotInnerH        = panelH - marginT - marginB
	spectrumMaxNines  = 5.0 // x axis runs to 99.999%
	minLatencyAxisUs  = 10.0
	maxLatencyAxisUs  = 1e7
	defaultTimelineTo = 10.0
)

// WriteSVG draws, under a subtitle (e.g. the command line), two panels: each workload's latency by percentile (the
// HdrHistogram percentile-spectrum plot: x is the number of nines, so the
// tail gets as much room as the median), and each workload's p99 per second
// over the run. Both latency axes are logarithmic, in microseconds. When a
// run has at least 10 samples, a third panel shows resident memory over it.
func WriteSVG(w io.Writer, results []Result, title string) error {
	var b strings.Builder
	withRSS := false
	for _, r := range results {
		withRSS = withRSS || len(r.Timeline) >= 10
	}
	height := 2*panelH + panelGap
	if withRSS {
		height += panelH + panelGap
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotW, height, plotW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")

	// Latency range over everything plotted, rounded out to decades.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range results {
		for _, p := range r.Spectrum {
			lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
		}
		for _, s := range r.Timeline {
			if s.P99 > 0 {
				lo, hi = math.Min(lo, s.P99), math.Max(hi, s.P99)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 100, 1e4
	}
	ylo := math.Max(minLatencyAxisUs, math.Pow(10, math.Floor(math.Log10(lo))))
	yhi := math.Min(maxLatencyAxisUs, math.Pow(10, math.Ceil(math.Log10(hi))))
	if yhi <= ylo {
		yhi = ylo * 10
	}
	tmax := 0.0
	for _, r := range results {
		if n := len(r.Timeline); n > 0 {
			tmax = math.Max(tmax, r.Timeline[n-1].T)
		}
	}
	if tmax == 0 {
		tmax = defaultTimelineTo
	}

	// Panel 1: percentile spectrum.
	p1 := panel{x0: marginL, y0: marginT, ylo: ylo, yhi: yhi, xlo: 0, xhi: spectrumMaxNines}
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="11" fill="#555">%s</text>`+"\n", marginL, html.EscapeString(title))
	p1.frame(&b, "Add latency by percentile", "percentile", "add latency")
	for _, n := range []float64{0, 1, 2, 3, 4, 5} {
		label := fmt.Sprintf("%.*f%%", max(0, int(n)-2), 100*(1-math.Pow(10, -n)))
		p1.xtick(&b, n, label)
	}
	p1.yticks(&b)
	for i, r := range results {
		var pts []Point
		for _, p := range r.Spectrum {
			nines := spectrumMaxNines
			if p.X < 100 {
				nines = math.Min(spectrumMaxNines, -math.Log10(1-p.X/100))
			}
			pts = append(pts, Point{nines, p.Y})
		}
		p1.line(&b, pts, i)
	}

	// Panel 2: p99 over time.
	p2 := panel{x0: marginL, y0: panelH + panelGap + marginT, ylo: ylo, yhi: yhi, xlo: 0, xhi: tmax}
	p2.frame(&b, "p99 per second (dots: max per second)", "seconds into the measured run", "add latency")
	step := niceStep(tmax / 8)
	for t := 0.0; t <= tmax+1e-9; t += step {
		p2.xtick(&b, t, fmt.Sprintf("%.3g", t))
	}
	p2.yticks(&b)
	for i, r := range results {
		var pts, maxes []Point
		for _, s := range r.Timeline {
			if s.P99 > 0 {
				pts = append(pts, Point{s.T, s.P99})
				maxes = append(maxes, Point{s.T, s.Max})
			}
		}
		p2.line(&b, pts, i)
		p2.dots(&b, maxes, i)
	}

	// Panel 3, for runs long enough to show a trend: resident memory.
	if withRSS {
		var rmax float64
		for _, r := range results {
			for _, s := range r.Timeline {
				rmax = math.Max(rmax, float64(s.RSS)/(1<<20))
			}
		}
		step := niceStep(math.Max(rmax, 1) / 6)
		p3 := panel{x0: marginL, y0: 2*(panelH+panelGap) + marginT, xlo: 0, xhi: tmax, ylo: 0, yhi: step * math.Ceil(math.Max(rmax, 1)/step), linear: true}
		p3.frame(&b, "Resident memory: the largest bookie (with bookies in this process, the whole process)", "seconds into the measured run", "RSS, MiB")
		for t := 0.0; t <= tmax+1e-9; t += niceStep(tmax / 8) {
			p3.xtick(&b, t, fmt.Sprintf("%.3g", t))
		}
		for v := 0.0; v <= p3.yhi+1e-9; v += step {
			Y := p3.py(v)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", p3.x0, Y, p3.x0+plotInnerW, Y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", p3.x0-6, Y+4, v)
		}
		for i, r := range results {
			var pts []Point
			for _, s := range r.Timeline {
				pts = append(pts, Point{s.T, float64(s.RSS) / (1 << 20)})
			}
			p3.line(&b, pts, i)
		}
	}

	// Legend.
	for i, r := range results {
		x, y := plotW-marginR+32, marginT+10+32*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`+"\n",
			x, y, x+22, y, palette[i%len(palette)], dash(i))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+28, y+4, html.EscapeString(r.Workload.Name))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">%.0f adds/s, p99 %s</text>`+"\n",
			x+28, y+16, r.AddsPerSec, fmtDur(r.Latency.P99))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// panel maps data to pixels: x linear, y logarithmic unless linear.
type panel struct {
	x0, y0             int
	xlo, xhi, ylo, yhi float64
	linear             bool
}

func (p panel) px(x float64) float64 {
	return float64(p.x0) + (x-p.xlo)/(p.xhi-p.xlo)*plotInnerW
}

func (p panel) py(y float64) float64 {
	y = math.Min(math.Max(y, p.ylo), p.yhi)
	if p.linear {
		return float64(p.y0+plotInnerH) - (y-p.ylo)/(p.yhi-p.ylo)*plotInnerH
	}
	f := (math.Log10(y) - math.Log10(p.ylo)) / (math.Log10(p.yhi) - math.Log10(p.ylo))
	return float64(p.y0+plotInnerH) - f*plotInnerH
}

func (p panel) frame(b *strings.Builder, title, xlabel, ylabel string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", p.x0, p.y0-14, title)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", p.x0, p.y0, plotInnerW, plotInnerH)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", p.x0+plotInnerW/2, p.y0+plotInnerH+38, xlabel)
	fmt.Fprintf(b, `<text transform="translate(%d,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", p.x0-55, p.y0+plotInnerH/2, ylabel)
}

func (p panel) xtick(b *strings.Builder, x float64, label string) {
	X := p.px(x)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", X, p.y0, X, p.y0+plotInnerH)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", X, p.y0+plotInnerH+18, label)
}

// yticks draws a grid line at every decade and labels 1, 2 and 5 times it.
func (p panel) yticks(b *strings.Builder) {
	for d := p.ylo; d <= p.yhi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > p.yhi*1.0001 {
				break
			}
			Y := p.py(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", p.x0, Y, p.x0+plotInnerW, Y, stroke)
			fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x0-6, Y+4, usLabel(v))
		}
	}
}

func (p panel) line(b *strings.Builder, pts []Point, i int) {
	if len(pts) == 0 {
		return
	}
	var path strings.Builder
	for j, q := range pts {
		cmd := "L"
		if j == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, p.px(q.X), p.py(q.Y))
	}
	fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n",
		strings.TrimSpace(path.String()), palette[i%len(palette)], dash(i))
}

func (p panel) dots(b *strings.Builder, pts []Point, i int) {
	for _, q := range pts {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s" fill-opacity="0.5"/>`+"\n",
			p.px(q.X), p.py(q.Y), palette[i%len(palette)])
	}
}

func dash(i int) string {
	if i < len(palette) {
		return ""
	}
	return ` stroke-dasharray="6,3"`
}

// usLabel prints a microsecond value as us, ms or s.
func usLabel(v float64) string {
	switch {
	case v < 1000:
		return fmt.Sprintf("%gus", v)
	case v < 1e6:
		return fmt.Sprintf("%gms", v/1e3)
	}
	return fmt.Sprintf("%gs", v/1e6)
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	d := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if d*m >= x {
			return d * m
		}
	}
	return 10 * d
}
