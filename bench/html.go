package bench

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
)

// WriteHTML writes the report as one self-contained HTML page: the table,
// the comparisons and inline SVG charts (lateness CDF per target on a log
// axis, throughput over time, memory and disk per pending message). It
// loads nothing from elsewhere.
func (r *Report) WriteHTML(w io.Writer) error {
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	var js strings.Builder
	if err := r.WriteJSON(&js); err != nil {
		return err
	}
	page := struct {
		Title, Table, JSON string
		Report             *Report
		Comparisons        []string
		Charts             []template.HTML
	}{Title: "delaywheel bench — " + r.Title(), Table: table.String(), JSON: js.String(), Report: r, Comparisons: r.Comparisons(), Charts: r.charts()}
	if err := template.Must(template.New("page").Parse(pageHTML)).Execute(w, page); err != nil {
		return fmt.Errorf("write HTML report: %w", err)
	}
	return nil
}

// pageHTML is the template of the report page.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.85em; }
.chart { margin: 1.5em 0; } svg { font-family: system-ui, sans-serif; }
.meta { color: #666; font-size: 0.9em; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="meta">Started {{.Report.Started.Format "2006-01-02 15:04:05 MST"}} on {{.Report.Host.Hostname}} ({{.Report.Host.CPUs}} CPUs, {{.Report.Host.OS}}/{{.Report.Host.Arch}}, {{.Report.Host.Go}}){{if .Report.Command}}<br>Command: <code>{{.Report.Command}}</code>{{end}}</p>
{{if .Comparisons}}<h2>At a glance</h2>
<ul>{{range .Comparisons}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Results</h2>
<pre>{{.Table}}</pre>
{{range .Charts}}<div class="chart">{{.}}</div>
{{end}}
<h2>Raw data</h2>
<details><summary>JSON</summary><pre>{{.JSON}}</pre></details>
</body>
</html>
`

// charts renders the charts the workload has data for.
func (r *Report) charts() []template.HTML {
	ran := r.ran()
	var out []template.HTML
	add := func(svg string) {
		if svg != "" {
			out = append(out, template.HTML(svg)) // built by the svg helpers, which escape every text
		}
	}
	switch r.Workload {
	case WorkloadFire, WorkloadFailover:
		var ss []series
		for _, res := range ran {
			ss = append(ss, cdfSeries(res.Target, res.Fire.CDF))
		}
		add(lineChart("Lateness (receive − due), cumulative distribution", "lateness", "fraction of messages delivered", ss, true, true, fmtMs, fmtFraction))
	case WorkloadEnqueue:
		var ss []series
		var bars []bar
		for _, res := range ran {
			ss = append(ss, cdfSeries(res.Target, res.Enqueue.CDF))
			bars = append(bars, bar{Group: res.Target, Series: "messages/s", Value: res.Enqueue.PerSec})
		}
		add(barChart("Enqueue rate", "messages per second", bars, fmtCount))
		add(lineChart("Latency of one enqueue call, cumulative distribution", "call latency", "fraction of calls", ss, true, true, fmtMs, fmtFraction))
	case WorkloadBacklog:
		var bars, disk []bar
		for _, res := range ran {
			k := res.Backlog
			bars = append(bars, bar{Group: res.Target, Series: "2 s after the fill", Value: k.RSSPerMsg},
				bar{Group: res.Target, Series: "settled after the fill", Value: k.RSSSettledPerMsg},
				bar{Group: res.Target, Series: "settled after a restart", Value: k.RSSRestartedPerMsg})
			disk = append(disk, bar{Group: res.Target, Series: "disk", Value: k.DiskPerMsg})
		}
		add(barChart("Resident memory per pending message", "bytes per message", bars, fmtCount))
		add(barChart("Disk per pending message", "bytes per message", disk, fmtCount))
	}
	var tp []series
	of := ""
	for _, res := range ran {
		if len(res.Throughput) == 0 {
			continue
		}
		s := series{Name: res.Target}
		for _, p := range res.Throughput {
			s.Points = append(s.Points, point{p.T, p.Rate})
		}
		tp = append(tp, s)
		of = res.ThroughputOf
	}
	if len(tp) > 0 {
		add(lineChart("Throughput over time ("+of+" per second)", "seconds", "messages per second", tp, false, false, fmtSeconds, fmtCount))
	}
	return out
}

func cdfSeries(name string, pts []CDFPoint) series {
	s := series{Name: name}
	for _, p := range pts {
		s.Points = append(s.Points, point{p.Ms, p.Fraction})
	}
	return s
}

type point struct{ X, Y float64 }

// series is one line of a chart.
type series struct {
	Name   string
	Points []point
}

// bar is one bar of a grouped bar chart.
type bar struct {
	Group, Series string
	Value         float64
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH                     = 760.0, 380.0
	padLeft, padRight, padTop, padBott = 80.0, 20.0, 40.0, 60.0
	legendW                            = 150.0 // a line chart's legend strip, right of its plot
)

// palette colours a target consistently across charts.
func colour(name string, i int) string {
	switch {
	case strings.HasPrefix(name, TargetDelaywheel):
		return "#1f77b4"
	case name == TargetRedis:
		return "#d62728"
	case name == TargetBeanstalkd:
		return "#2ca02c"
	}
	others := []string{"#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"}
	return others[i%len(others)]
}

// axis maps data values to one dimension of the plot area.
type axis struct {
	lo, hi   float64 // data range (log10 of it when log)
	log      bool
	from, to float64 // pixel range
}

func (a axis) pos(v float64) float64 {
	if a.log {
		v = math.Log10(math.Max(v, math.Pow(10, a.lo)))
	}
	if a.hi == a.lo {
		return (a.from + a.to) / 2
	}
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// ticks returns tick values: decades on a log axis, about five round steps
// on a linear one.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := a.lo; e <= a.hi+1e-9; e++ {
			out = append(out, math.Pow(10, e))
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds a step up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// svgOpen starts an SVG element with a title.
func svgOpen(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" role="img">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<title>%s</title>`, html.EscapeString(title))
	fmt.Fprintf(b, `<text x="%g" y="22" font-size="15" font-weight="bold">%s</text>`, padLeft, html.EscapeString(title))
}

// lineChart draws ss against a linear or (xLog) logarithmic x axis, y
// linear from 0; step draws each series as a staircase, as a cumulative
// distribution is. It returns "" when no series has a point.
func lineChart(title, xLabel, yLabel string, ss []series, xLog, step bool, fx, fy func(float64) string) string {
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for _, p := range s.Points {
			x := p.X
			if xLog && x <= 0 {
				continue
			}
			xmin, xmax, ymax = math.Min(xmin, x), math.Max(xmax, x), math.Max(ymax, p.Y)
		}
	}
	if math.IsInf(xmin, 1) {
		return ""
	}
	xa := axis{lo: xmin, hi: xmax, log: xLog, from: padLeft, to: chartW - padRight - legendW}
	if xLog {
		xa.lo, xa.hi = math.Floor(math.Log10(math.Max(xmin, 1e-3))), math.Ceil(math.Log10(math.Max(xmax, 1e-3)))
		if xa.hi <= xa.lo {
			xa.hi = xa.lo + 1
		}
	} else if xa.lo > 0 {
		xa.lo = 0
	}
	if ymax <= 0 {
		ymax = 1
	}
	ya := axis{lo: 0, hi: ymax, from: chartH - padBott, to: padTop}
	var b strings.Builder
	svgOpen(&b, title)
	frame(&b, xa, ya, xLabel, yLabel, fx, fy)
	for i, s := range ss {
		var d strings.Builder
		for _, p := range s.Points {
			if xLog && p.X <= 0 {
				p.X = math.Pow(10, xa.lo)
			}
			switch {
			case d.Len() == 0:
				fmt.Fprintf(&d, "M%.1f %.1f ", xa.pos(p.X), ya.pos(p.Y))
			case step:
				// A distribution holds its fraction until the next
				// recorded value: across, then up.
				fmt.Fprintf(&d, "H%.1f V%.1f ", xa.pos(p.X), ya.pos(p.Y))
			default:
				fmt.Fprintf(&d, "L%.1f %.1f ", xa.pos(p.X), ya.pos(p.Y))
			}
		}
		if d.Len() == 0 {
			continue
		}
		// Lines drawn earlier are wider, and every other one is dashed,
		// so a line that runs exactly along another stays visible.
		width := 2 + 2*float64(len(ss)-1-i)
		dash := ""
		if i%2 == 1 {
			dash = ` stroke-dasharray="8 4"`
		}
		fmt.Fprintf(&b, `<path class="series" data-series="%s" d="%s" fill="none" stroke="%s" stroke-width="%g" stroke-opacity="0.85"%s/>`,
			html.EscapeString(s.Name), strings.TrimSpace(d.String()), colour(s.Name, i), width, dash)
	}
	legend(&b, ss, xa.to+16)
	b.WriteString(`</svg>`)
	return b.String()
}

// frame draws the axes, grid lines, tick labels and axis labels.
func frame(b *strings.Builder, xa, ya axis, xLabel, yLabel string, fx, fy func(float64) string) {
	x0, x1, y0, y1 := xa.from, xa.to, ya.from, ya.to
	for _, t := range xa.ticks() {
		x := xa.pos(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, x, y0, x, y1)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`, x, y0+16, html.EscapeString(fx(t)))
	}
	for _, t := range ya.ticks() {
		y := ya.pos(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, x0, y, x1, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`, x0-6, y+4, html.EscapeString(fy(t)))
	}
	fmt.Fprintf(b, `<path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f" fill="none" stroke="#333"/>`, x0, y1, x0, y0, x1, y0)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">%s</text>`, (x0+x1)/2, chartH-18, html.EscapeString(xLabel))
	fmt.Fprintf(b, `<text x="16" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`,
		(y0+y1)/2, (y0+y1)/2, html.EscapeString(yLabel))
}

// legend lists the series' names and colours from x rightwards, at the
// top: a line chart keeps that strip to the right of its plot, so no curve
// runs under the legend.
func legend(b *strings.Builder, ss []series, x float64) {
	y := padTop + 6
	for i, s := range ss {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="14" height="4" fill="%s"/>`, x, y-4, colour(s.Name, i))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12">%s</text>`, x+20, y+1, html.EscapeString(s.Name))
		y += 18
	}
}

// barChart draws grouped bars (one group per target, one bar per series)
// from a zero baseline. It returns "" when there is no positive value.
func barChart(title, yLabel string, bars []bar, fy func(float64) string) string {
	var groups, names []string
	ymax := 0.0
	for _, br := range bars {
		if !slices.Contains(groups, br.Group) {
			groups = append(groups, br.Group)
		}
		if !slices.Contains(names, br.Series) {
			names = append(names, br.Series)
		}
		ymax = math.Max(ymax, br.Value)
	}
	if ymax <= 0 {
		return ""
	}
	hi := ymax * 1.1
	if len(names) > 1 { // the legend is drawn: keep the tallest bar and its label below it
		plotH := chartH - padBott - padTop
		hi = math.Max(hi, ymax*plotH/(plotH-18*float64(len(names))-14))
	}
	ya := axis{lo: 0, hi: hi, from: chartH - padBott, to: padTop}
	var b strings.Builder
	svgOpen(&b, title)
	for _, t := range ya.ticks() {
		y := ya.pos(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, padLeft, y, chartW-padRight, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`, padLeft-6, y+4, html.EscapeString(fy(t)))
	}
	fmt.Fprintf(&b, `<path d="M%.1f %.1f L%.1f %.1f L%.1f %.1f" fill="none" stroke="#333"/>`,
		padLeft, padTop, padLeft, ya.from, chartW-padRight, ya.from)
	fmt.Fprintf(&b, `<text x="16" y="%.1f" font-size="12" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`,
		(ya.from+ya.to)/2, (ya.from+ya.to)/2, html.EscapeString(yLabel))
	groupW := (chartW - padLeft - padRight) / float64(len(groups))
	barW := math.Min(60, groupW*0.8/float64(len(names)))
	shades := []float64{1, 0.55, 0.3}
	for gi, g := range groups {
		left := padLeft + groupW*float64(gi) + (groupW-barW*float64(len(names)))/2
		for _, br := range bars {
			if br.Group != g || br.Value <= 0 {
				continue
			}
			si := slices.Index(names, br.Series)
			x, y := left+barW*float64(si), ya.pos(br.Value)
			fmt.Fprintf(&b, `<rect class="bar" data-series="%s" data-group="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%.2f"><title>%s</title></rect>`,
				html.EscapeString(br.Series), html.EscapeString(g), x, y, barW-2, ya.from-y, colour(g, gi), shades[si%len(shades)],
				html.EscapeString(fmt.Sprintf("%s, %s: %s", g, br.Series, fy(br.Value))))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`, x+barW/2-1, y-4, html.EscapeString(fy(br.Value)))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">%s</text>`, padLeft+groupW*(float64(gi)+0.5), ya.from+18, html.EscapeString(g))
	}
	if len(names) > 1 {
		var ss []series
		for _, n := range names {
			ss = append(ss, series{Name: n})
		}
		y := padTop + 6
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="196" height="%d" fill="#fff" fill-opacity="0.85"/>`, chartW-padRight-206, y-14, 18*len(ss)+6)
		for i, s := range ss {
			x := chartW - padRight - 200
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="10" fill="#555" fill-opacity="%.2f"/>`, x, y-8, shades[i%len(shades)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12">%s</text>`, x+20, y+1, html.EscapeString(s.Name))
			y += 18
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// fmtMs labels a millisecond value with a fitting unit.
func fmtMs(ms float64) string {
	switch {
	case ms >= 1000:
		return trimFloat(ms/1000) + " s"
	case ms >= 1:
		return trimFloat(ms) + " ms"
	}
	return trimFloat(ms*1000) + " µs"
}

func fmtSeconds(s float64) string  { return trimFloat(s) + " s" }
func fmtFraction(f float64) string { return trimFloat(math.Round(f*100)) + "%" }
func fmtCount(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.2f", v)
	case math.Abs(v) < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return si(v)
}

// trimFloat prints v with at most three decimals and no trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}
