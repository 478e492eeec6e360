package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// svgSeries parses every <svg> of an HTML page as XML and returns, per
// chart title, the data-series (and data-group) attributes of its paths and
// bars.
func svgSeries(t *testing.T, page string) map[string][]string {
	t.Helper()
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1)
	if len(svgs) == 0 {
		t.Fatal("no <svg> in the page")
	}
	out := map[string][]string{}
	for _, svg := range svgs {
		dec := xml.NewDecoder(strings.NewReader(svg))
		title, inTitle := "", false
		var names []string
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("invalid SVG: %v\n%s", err, svg)
			}
			switch el := tok.(type) {
			case xml.StartElement:
				inTitle = el.Name.Local == "title" && title == ""
				for _, a := range el.Attr {
					if a.Name.Local == "data-series" || a.Name.Local == "data-group" {
						names = append(names, a.Name.Local+":"+a.Value)
					}
				}
				if el.Name.Local == "path" && hasAttr(el, "class", "series") && !regexp.MustCompile(`^M[\d.]+ [\d.]+( L[\d.]+ [\d.]+| H[\d.]+ V[\d.]+)*$`).MatchString(attr(el, "d")) {
					t.Fatalf("path d=%q is not a polyline or staircase", attr(el, "d"))
				}
			case xml.CharData:
				if inTitle {
					title += string(el)
				}
			case xml.EndElement:
				inTitle = false
			}
		}
		out[title] = names
	}
	return out
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func hasAttr(el xml.StartElement, name, value string) bool { return attr(el, name) == value }

func fireReport() *Report {
	mk := func(name string, scale float64) Result {
		h := newHist()
		for i := 1; i <= 1000; i++ {
			recordMicros(h, int64(float64(i)*scale))
		}
		tl := newTimeline(time.Unix(0, 0))
		for i := range 300 {
			tl.Add(time.Unix(0, 0).Add(time.Duration(i)*10*time.Millisecond), 100)
		}
		return Result{Target: name, Fire: &FireResult{Outcome: Outcome{Sent: 1000, Received: 1000, Lateness: summarize(h), CDF: cdf(h)}},
			Throughput: tl.Rates(50), ThroughputOf: "delivered"}
	}
	return &Report{
		Workload: WorkloadFire, Started: time.Unix(1_700_000_000, 0).UTC(), Command: "delaywheel bench fire <&>",
		Params:  Params{Messages: 1000, Rate: 10000, DurationS: 30, Consumers: 4, Spawn: 1},
		Results: []Result{mk("delaywheel", 1), mk("redis", 10), mk("beanstalkd", 1000), {Target: "other", Skipped: "other not installed"}},
	}
}

func TestHTMLReportFire(t *testing.T) {
	var buf bytes.Buffer
	if err := fireReport().WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []string{"<script", "http://", "https://", "<&>"} {
		if bad == "http://" && strings.Count(page, bad) != strings.Count(page, `xmlns="http://www.w3.org/2000/svg"`) {
			t.Fatalf("the page links to something: %q", bad)
		} else if bad != "http://" && strings.Contains(page, bad) {
			t.Fatalf("the page contains %q", bad)
		}
	}
	charts := svgSeries(t, page)
	want := []string{"data-series:delaywheel", "data-series:redis", "data-series:beanstalkd"}
	var cdfChart, tpChart []string
	for title, names := range charts {
		switch {
		case strings.HasPrefix(title, "Lateness"):
			cdfChart = names
		case strings.HasPrefix(title, "Throughput"):
			tpChart = names
		}
	}
	if !slices.Equal(cdfChart, want) || !slices.Equal(tpChart, want) {
		t.Fatalf("charts %v: want the lateness CDF and the throughput with series %v", charts, want)
	}
	if !strings.Contains(page, "skipped: other not installed") || !strings.Contains(page, "p99 lateness: delaywheel = 0.100× redis") {
		t.Fatalf("the page lacks the table's skip line or the comparison:\n%s", page)
	}
}

// TestComparisonsServerCPU: the comparisons give delaywheel's server CPU
// per message as a ratio of each alternative's that measured one, and name
// none for an alternative without it.
func TestComparisonsServerCPU(t *testing.T) {
	r := fireReport()
	r.Results[0].Fire.CPU = &ServerCPU{PerMsgUs: 92.7}
	r.Results[1].Fire.CPU = &ServerCPU{PerMsgUs: 17.5}
	got := strings.Join(r.Comparisons(), "\n")
	if !strings.Contains(got, "server CPU per message: delaywheel = 5.30× redis") {
		t.Fatalf("comparisons lack the CPU ratio to redis:\n%s", got)
	}
	if n := strings.Count(got, "server CPU"); n != 1 {
		t.Fatalf("a CPU ratio for an alternative that measured none:\n%s", got)
	}
}

func TestHTMLReportBacklog(t *testing.T) {
	r := &Report{Workload: WorkloadBacklog, Params: Params{Messages: 100}, Results: []Result{
		{Target: "delaywheel", Backlog: &BacklogResult{Pending: 100, RSSPerMsg: 3.5, RSSSettledPerMsg: 3, RSSRestartedPerMsg: 2, DiskPerMsg: 150}},
		{Target: "redis", Backlog: &BacklogResult{Pending: 100, RSSPerMsg: 180, RSSSettledPerMsg: 175, RSSRestartedPerMsg: 170, DiskPerMsg: 120}},
	}}
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	charts := svgSeries(t, buf.String())
	mem := charts["Resident memory per pending message"]
	want := []string{"data-series:2 s after the fill", "data-group:delaywheel", "data-series:settled after the fill", "data-group:delaywheel",
		"data-series:settled after a restart", "data-group:delaywheel",
		"data-series:2 s after the fill", "data-group:redis", "data-series:settled after the fill", "data-group:redis",
		"data-series:settled after a restart", "data-group:redis"}
	if !slices.Equal(mem, want) {
		t.Fatalf("memory chart bars %v, want %v", mem, want)
	}
	if len(charts["Disk per pending message"]) != 4 {
		t.Fatalf("disk chart bars %v", charts["Disk per pending message"])
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "resident bytes per pending message: delaywheel = 0.0171× redis settled after the fill (2 s after it: 0.0194×; settled after a restart: 0.0118×)") {
		t.Fatalf("table:\n%s", table.String())
	}
}

func TestAxisAndLabels(t *testing.T) {
	a := axis{lo: -2, hi: 3, log: true, from: 0, to: 500}
	if got := a.pos(1); got != 200 {
		t.Fatalf("log axis: 1 ms at %v, want 200", got)
	}
	if got := a.pos(0); got != 0 {
		t.Fatalf("log axis: 0 clamps to the lowest decade, got %v", got)
	}
	if ticks := a.ticks(); len(ticks) != 6 || ticks[0] != 0.01 || ticks[5] != 1000 {
		t.Fatalf("log ticks %v", ticks)
	}
	lin := axis{lo: 0, hi: 12345, from: 0, to: 100}
	if ticks := lin.ticks(); len(ticks) != 5 || ticks[1] != 2500 {
		t.Fatalf("linear ticks %v", ticks)
	}
	for ms, want := range map[float64]string{0.05: "50 µs", 2.5: "2.5 ms", 1500: "1.5 s"} {
		if got := fmtMs(ms); got != want {
			t.Fatalf("fmtMs(%v) = %q, want %q", ms, got, want)
		}
	}
	if lineChart("t", "x", "y", []series{{Name: "a"}}, true, true, fmtMs, fmtFraction) != "" {
		t.Fatal("a chart without points")
	}
}

// TestTimesFormatsRatios: a ratio shows its decimals, and one those
// decimals would round to nothing shows two significant digits instead.
func TestTimesFormatsRatios(t *testing.T) {
	for _, c := range []struct {
		x    float64
		prec int
		want string
	}{
		{0.174, 3, "0.174"},
		{0.52, 2, "0.52"},
		{18.03, 2, "18.03"},
		{0, 3, "0.000"},
		{0.000214, 3, "0.00021"},
		{0.0004999, 3, "0.0005"},
		{0.0005, 3, "0.001"},
		{0.00001234, 4, "1.2e-05"},
	} {
		if got := times(c.x, c.prec); got != c.want {
			t.Errorf("times(%v, %d) = %q, want %q", c.x, c.prec, got, c.want)
		}
	}
}

// TestBarsClearLegend checks that with a legend drawn, the tallest bar
// and its value label stay below it.
func TestBarsClearLegend(t *testing.T) {
	var bars []bar
	for _, g := range []string{"delaywheel", "redis"} {
		for i, s := range []string{"a", "b", "c"} {
			bars = append(bars, bar{Group: g, Series: s, Value: float64(100 * (i + 1))})
		}
	}
	svg := barChart("t", "y", bars, trimFloat)
	legendBottom := padTop - 8 + 18*3 + 6 // the legend's box: from padTop-8, 18 px a series and 6 more
	tops := regexp.MustCompile(`<rect class="bar"[^>]* y="([0-9.]+)"`).FindAllStringSubmatch(svg, -1)
	if len(tops) != 6 {
		t.Fatalf("%d bars drawn, want 6", len(tops))
	}
	for _, m := range tops {
		y, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		if y-14 < legendBottom { // the value label sits above the bar
			t.Fatalf("a bar's top at y=%g with its label reaches into the legend, which ends at y=%g", y, legendBottom)
		}
	}
}

// TestLineChartLegendRightOfPlot checks that no curve reaches into the
// legend: the legend's strip starts right of the plot's last point.
func TestLineChartLegendRightOfPlot(t *testing.T) {
	ss := []series{
		{Name: "delaywheel", Points: []point{{X: 0.1, Y: 0}, {X: 1, Y: 0.99}, {X: 10, Y: 1}}},
		{Name: "beanstalkd", Points: []point{{X: 5, Y: 0}, {X: 9000, Y: 1}}},
	}
	svg := lineChart("t", "x", "y", ss, true, false, fmtMs, trimFloat)
	legendX := math.Inf(1)
	for _, m := range regexp.MustCompile(`<rect x="([0-9.]+)"[^>]* height="4"`).FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		legendX = math.Min(legendX, x)
	}
	if math.IsInf(legendX, 1) {
		t.Fatal("no legend drawn")
	}
	for _, d := range regexp.MustCompile(`<path class="series"[^>]* d="([^"]+)"`).FindAllStringSubmatch(svg, -1) {
		for _, xy := range regexp.MustCompile(`[ML]([0-9.]+) `).FindAllStringSubmatch(d[1]+" ", -1) {
			if x, _ := strconv.ParseFloat(xy[1], 64); x >= legendX {
				t.Fatalf("a curve reaches x=%g, into the legend at x=%g", x, legendX)
			}
		}
	}
}

// TestLineChartOverlappingSeriesStayVisible draws two identical series: the
// one drawn first must be wider, so the one on top does not hide it.
func TestLineChartOverlappingSeriesStayVisible(t *testing.T) {
	pts := []point{{0, 5}, {1, 5}, {2, 5}}
	svg := lineChart("t", "x", "y", []series{{Name: "a", Points: pts}, {Name: "b", Points: pts}}, false, false, fmtSeconds, fmtCount)
	re := regexp.MustCompile(`data-series="(a|b)"[^>]*stroke-width="([0-9.]+)"`)
	widths := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(svg, -1) {
		widths[m[1]] = m[2]
	}
	if len(widths) != 2 || widths["a"] == widths["b"] {
		t.Fatalf("stroke widths %v: want two series of different widths", widths)
	}
	if !strings.Contains(svg, `stroke-dasharray`) {
		t.Errorf("no dashed series in %s", svg)
	}
}

// TestCDFStepsFromLowestValue checks that a distribution's chart starts at
// its lowest recorded value, with every step backed by recorded values,
// and is drawn as a staircase.
func TestCDFStepsFromLowestValue(t *testing.T) {
	h := newHist()
	for v := int64(1); v <= 100_000; v++ {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	pts := cdf(h)
	if len(pts) > 2*cdfMaxPoints {
		t.Errorf("%d points, bound %d", len(pts), 2*cdfMaxPoints)
	}
	if first := pts[0]; first.Fraction > 2.0/cdfMaxPoints || first.Ms > 1 {
		t.Fatalf("first point %+v: want the lowest values, not a jump from 0", first)
	}
	for i := 1; i < len(pts); i++ {
		if jump := pts[i].Fraction - pts[i-1].Fraction; jump > 2.0/cdfMaxPoints {
			t.Fatalf("fraction jumps by %v between %+v and %+v on uniform values", jump, pts[i-1], pts[i])
		}
	}
	svg := lineChart("t", "x", "y", []series{cdfSeries("a", pts)}, true, true, fmtMs, fmtFraction)
	if !strings.Contains(svg, " H") || !strings.Contains(svg, " V") {
		t.Errorf("cdf not drawn as steps: %.300s", svg)
	}
}
