package experiments

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gangway/gangway/internal/sim"
)

// Line is one series of a chart.
type Line struct {
	Name   string
	X, Y   []float64
	Dashed bool
}

// Chart is a line chart written as a standalone SVG file with the
// standard library only.
type Chart struct {
	Title, XLabel, YLabel string
	// LogX puts x on a log10 scale (values ≤ 0 are dropped).
	LogX bool
	// XFormat formats an x tick value; nil prints the number.
	XFormat func(float64) string
	// DurationTicks puts log-scale x ticks at round durations (seconds).
	DurationTicks bool
	// XMin and XMax fix the x range when XMax > XMin (linear x only);
	// YMin and YMax fix the y range when YMax > YMin.
	XMin, XMax float64
	YMin, YMax float64
	Lines      []Line
}

var durationTicks = []float64{1, 10, 30, 60, 120, 300, 600, 1800, 3600, 2 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 30 * 86400, 100 * 86400}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

const (
	chartW, chartH                   = 760, 440
	padL, padR, padT, padB           = 72, 170, 40, 56
	plotW, plotH                     = chartW - padL - padR, chartH - padT - padB
	maxPointsPerLine                 = 2500
	fontFamily                       = "system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"
	gridColor, axisColor, labelColor = "#e5e5e5", "#333", "#222"
)

// WriteSVG writes the chart.
func (c Chart) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	tx := func(x float64) float64 {
		if c.LogX {
			return math.Log10(x)
		}
		return x
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, l := range c.Lines {
		for i := range l.X {
			if c.LogX && l.X[i] <= 0 {
				continue
			}
			if math.IsNaN(l.X[i]) || math.IsNaN(l.Y[i]) || math.IsInf(l.Y[i], 0) {
				continue
			}
			x := tx(l.X[i])
			xmin, xmax = min(xmin, x), max(xmax, x)
			ymin, ymax = min(ymin, l.Y[i]), max(ymax, l.Y[i])
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	if c.YMax > c.YMin {
		ymin, ymax = c.YMin, c.YMax
	} else if ymin > 0 && ymin < 0.5*ymax {
		ymin = 0
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	var xt []float64
	if c.LogX {
		if c.DurationTicks {
			for _, d := range durationTicks {
				if v := math.Log10(d); v >= xmin-0.05 && v <= xmax+0.05 {
					xt = append(xt, v)
				}
			}
			for len(xt) > 9 {
				var thin []float64
				for i := 0; i < len(xt); i += 2 {
					thin = append(thin, xt[i])
				}
				xt = thin
			}
		}
		if len(xt) < 2 {
			xt = xt[:0]
			xmin, xmax = math.Floor(xmin), math.Ceil(xmax)
			for e := xmin; e <= xmax; e++ {
				xt = append(xt, e)
			}
		} else {
			xmin, xmax = min(xmin-0.05, xt[0]), max(xmax+0.05, xt[len(xt)-1])
		}
	} else if c.XMax > c.XMin {
		xmin, xmax = c.XMin, c.XMax
		xt = niceTicks(xmin, xmax, 6)
		for len(xt) > 0 && xt[0] < xmin {
			xt = xt[1:]
		}
	} else {
		xt = niceTicks(xmin, xmax, 6)
		xmin, xmax = min(xmin, xt[0]), max(xmax, xt[len(xt)-1])
	}
	yt := niceTicks(ymin, ymax, 6)
	if c.YMax <= c.YMin {
		ymin, ymax = min(ymin, yt[0]), max(ymax, yt[len(yt)-1])
	}
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 { return padT + plotH - (y-ymin)/(ymax-ymin)*plotH }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH, fontFamily)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(bw, `<text x="%d" y="22" font-size="15" font-weight="600" fill="%s">%s</text>`+"\n", padL, labelColor, html.EscapeString(c.Title))
	for _, t := range xt {
		x := px(t)
		label := fmtTick(t)
		if c.LogX {
			label = fmtTick(math.Pow(10, t))
			if c.XFormat != nil {
				label = c.XFormat(math.Pow(10, t))
			}
		} else if c.XFormat != nil {
			label = c.XFormat(t)
		}
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, padT, x, padT+plotH, gridColor)
		fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", x, padT+plotH+18, labelColor, html.EscapeString(label))
	}
	for _, t := range yt {
		if t < ymin-1e-9 || t > ymax+1e-9 {
			continue
		}
		y := py(t)
		fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y, padL+plotW, y, gridColor)
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", padL-6, y+4, labelColor, html.EscapeString(fmtTick(t)))
	}
	fmt.Fprintf(bw, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", padL, padT, plotW, plotH, axisColor)
	fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", padL+plotW/2, chartH-14, labelColor, html.EscapeString(c.XLabel))
	fmt.Fprintf(bw, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`+"\n", padT+plotH/2, labelColor, html.EscapeString(c.YLabel))
	fmt.Fprintf(bw, `<clipPath id="plot"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>`+"\n", padL, padT, plotW, plotH)
	for i, l := range c.Lines {
		color := palette[i%len(palette)]
		var b strings.Builder
		step := max(1, len(l.X)/maxPointsPerLine)
		n := 0
		for k := 0; k < len(l.X); k += step {
			if c.LogX && l.X[k] <= 0 || math.IsNaN(l.Y[k]) || math.IsInf(l.Y[k], 0) {
				continue
			}
			if n > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", px(tx(l.X[k])), py(l.Y[k]))
			n++
		}
		if last := len(l.X) - 1; last >= 0 && last%step != 0 && !(c.LogX && l.X[last] <= 0) {
			fmt.Fprintf(&b, " %.1f,%.1f", px(tx(l.X[last])), py(l.Y[last]))
		}
		dash := ""
		if l.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(bw, `<polyline clip-path="url(#plot)" fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`+"\n", color, dash, b.String())
		ly := padT + 14 + i*20
		fmt.Fprintf(bw, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+12, ly-4, padL+plotW+36, ly-4, color, dash)
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", padL+plotW+42, ly, labelColor, html.EscapeString(l.Name))
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return []float64{lo}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var out []float64
	for v := start; v <= hi+step*0.5; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

func fmtTick(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// FormatSeconds prints a duration in seconds briefly: 45s, 12m, 3.5h, 2d.
func FormatSeconds(s float64) string {
	switch {
	case s < 60:
		return strconv.FormatFloat(s, 'g', 3, 64) + "s"
	case s < 3600:
		return strconv.FormatFloat(s/60, 'g', 3, 64) + "m"
	case s < 86400:
		return strconv.FormatFloat(s/3600, 'g', 3, 64) + "h"
	}
	return strconv.FormatFloat(s/86400, 'g', 3, 64) + "d"
}

// JCTCDF is the chart of each run's job-completion-time distribution.
func JCTCDF(title string, runs []*sim.Result) Chart {
	c := Chart{Title: title, XLabel: "job completion time (log scale)", YLabel: "fraction of jobs", LogX: true,
		XFormat: FormatSeconds, DurationTicks: true, YMin: 0, YMax: 1}
	for _, r := range runs {
		var jct []float64
		for _, j := range r.Jobs {
			if v := j.JCT(); v >= 0 {
				jct = append(jct, max(v, 1))
			}
		}
		slices.Sort(jct)
		l := Line{Name: r.Summary.Policy}
		for i, v := range jct {
			l.X = append(l.X, v)
			l.Y = append(l.Y, float64(i+1)/float64(len(jct)))
		}
		c.Lines = append(c.Lines, l)
	}
	return c
}

// QueueChart plots pending jobs over time, one line per run.
func QueueChart(title string, runs []*sim.Result) Chart {
	c := Chart{Title: title, XLabel: "days since the first submission", YLabel: "jobs waiting"}
	for _, r := range runs {
		l := Line{Name: r.Summary.Policy}
		for i, t := range r.Series.T {
			l.X = append(l.X, t/86400)
			l.Y = append(l.Y, float64(r.Series.Pending[i]))
		}
		c.Lines = append(c.Lines, l)
	}
	return c
}

// UtilizationChart plots the share of GPUs held by jobs over time, one
// line per run, averaged over windows of about a day/8 to be readable.
func UtilizationChart(title string, runs []*sim.Result) Chart {
	c := Chart{Title: title, XLabel: "days since the first submission", YLabel: "GPU utilization", YMin: 0, YMax: 1}
	for _, r := range runs {
		l := Line{Name: r.Summary.Policy}
		s := r.Series
		if len(s.T) == 0 {
			c.Lines = append(c.Lines, l)
			continue
		}
		win := 1
		if len(s.T) > 1 {
			win = max(1, int(10800/(s.T[1]-s.T[0])))
		}
		for i := 0; i < len(s.T); i += win {
			var busy, all float64
			for k := i; k < min(i+win, len(s.T)); k++ {
				busy += float64(s.Busy[k])
				all += float64(r.GPUs)
			}
			l.X = append(l.X, s.T[i]/86400)
			l.Y = append(l.Y, busy/all)
		}
		c.Lines = append(c.Lines, l)
	}
	return c
}
