package bench

import (
	"math"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histograms hold microseconds from 1 µs to one hour at three significant
// digits; larger values are recorded as the maximum.
const (
	histMaxMicros = int64(time.Hour / time.Microsecond)
	histSigFigs   = 3
)

// newHist returns an empty microsecond histogram.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, histMaxMicros, histSigFigs)
}

// recordMicros records v microseconds, clamped to the histogram's range.
func recordMicros(h *hdrhistogram.Histogram, v int64) {
	_ = h.RecordValue(min(max(v, 0), histMaxMicros))
}

// Summary is the distribution of a latency, in milliseconds.
type Summary struct {
	Count int64   `json:"count"`
	Min   float64 `json:"min_ms"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// summarize reads the percentiles of a microsecond histogram.
func summarize(h *hdrhistogram.Histogram) Summary {
	if h.TotalCount() == 0 {
		return Summary{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	// ValueAtQuantile answers the highest value equivalent to the bucket;
	// the extremes come from Min and Max, which are exact buckets too.
	return Summary{
		Count: h.TotalCount(),
		Min:   ms(h.Min()),
		Mean:  round3(h.Mean() / 1000),
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

// CDFPoint is one point of a cumulative distribution: the fraction of values
// at or below Ms milliseconds.
type CDFPoint struct {
	Ms       float64 `json:"ms"`
	Fraction float64 `json:"fraction"`
}

// cdfMaxPoints bounds the points of a CDF below its last percent, so a
// report stays small.
const cdfMaxPoints = 400

// cdf returns the cumulative distribution of a microsecond histogram as the
// upper edge of every recorded bucket with the fraction at or below it, so
// every point is backed by recorded values, from the lowest one up. Where
// there are more than cdfMaxPoints buckets, a point is kept only when the
// fraction has grown by at least 1/cdfMaxPoints since the last kept one or
// lies in the last percent, where the tail needs every step; the last
// bucket is always kept.
func cdf(h *hdrhistogram.Histogram) []CDFPoint {
	total := h.TotalCount()
	if total == 0 {
		return nil
	}
	var bars []hdrhistogram.Bar
	for _, b := range h.Distribution() {
		if b.Count > 0 {
			bars = append(bars, b)
		}
	}
	var out []CDFPoint
	var seen int64
	for i, b := range bars {
		seen += b.Count
		p := CDFPoint{Ms: float64(b.To) / 1000, Fraction: round6(float64(seen) / float64(total))}
		if n := len(out); n > 0 && len(bars) > cdfMaxPoints && i < len(bars)-1 &&
			p.Fraction < 0.99 && p.Fraction-out[n-1].Fraction < 1.0/cdfMaxPoints {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Ms == p.Ms {
			out[n-1].Fraction = p.Fraction
			continue
		}
		out = append(out, p)
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }
