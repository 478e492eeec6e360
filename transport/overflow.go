package transport

import (
	"context"
	"net/http"
	"strconv"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
)

// OverflowReader is implemented by backends that count the overflow by due
// time (GET /v1/wheel/overflow).
type OverflowReader interface {
	// Overflow groups the overflow into buckets of bucketMs (a positive
	// multiple of wheel.OverflowHourMs) and returns the first limit
	// non-empty ones.
	Overflow(ctx context.Context, bucketMs int64, limit int) (wheel.OverflowHistogram, error)
}

// Limits of GET /v1/wheel/overflow.
const (
	maxOverflowBucketMs     = 366 * 24 * wheel.OverflowHourMs // a year
	defaultOverflowBuckets  = 168                             // a week of hours
	maxOverflowBucketsLimit = 10_000
)

// overflow answers GET /v1/wheel/overflow?bucket_ms=&limit=.
func (s *Server) overflow(r *http.Request) (any, error) {
	o, ok := s.be(r).(OverflowReader)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: api.CodeInternal, Message: "this node cannot count its overflow"}
	}
	bucketMs := int64(wheel.OverflowHourMs)
	if q := r.URL.Query().Get("bucket_ms"); q != "" {
		v, err := strconv.ParseInt(q, 10, 64)
		if err != nil || v < wheel.OverflowHourMs || v > maxOverflowBucketMs || v%wheel.OverflowHourMs != 0 {
			return nil, invalid("bucket_ms: must be a multiple of %d (1 hour) between %d and %d (366 days), got %s",
				wheel.OverflowHourMs, wheel.OverflowHourMs, maxOverflowBucketMs, quoteShort(q))
		}
		bucketMs = v
	}
	limit, err := queryInt(r, "limit", defaultOverflowBuckets, 1, maxOverflowBucketsLimit)
	if err != nil {
		return nil, err
	}
	h, err := o.Overflow(r.Context(), bucketMs, limit)
	if err != nil {
		return nil, err
	}
	out := api.Overflow{BucketMs: h.BucketMs, Total: h.Total, Beyond: h.Beyond, Buckets: make([]api.OverflowBucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		out.Buckets[i] = api.OverflowBucket{StartMs: b.StartMs, Messages: b.Messages}
	}
	return out, nil
}
