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

// cdf returns the cumulative distribution of a microsecond histogram, with
// more points towards the tail.
func cdf(h *hdrhistogram.Histogram) []CDFPoint {
	if h.TotalCount() == 0 {
		return nil
	}
	var out []CDFPoint
	for _, b := range h.CumulativeDistributionWithTicks(5) {
		p := CDFPoint{Ms: float64(b.ValueAt) / 1000, Fraction: round6(b.Quantile / 100)}
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
