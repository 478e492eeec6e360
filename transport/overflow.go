package transport

import (
	"net/http"
	"strconv"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
)

// Limits of GET /v1/wheel/overflow.
const (
	maxOverflowBucketMs     = 366 * 24 * wheel.OverflowHourMs // a year
	defaultOverflowBuckets  = 168                             // a week of hours
	maxOverflowBucketsLimit = 10_000
)

// overflow answers GET /v1/wheel/overflow?bucket_ms=&limit=.
func (s *Server) overflow(r *http.Request) (any, error) {
	o := s.be(r)
	bucketMs := int64(wheel.OverflowHourMs)
	if q := r.URL.Query().Get("bucket_ms"); q != "" {
		v, err := strconv.ParseInt(q, 10, 64)
		if err != nil || v < wheel.OverflowHourMs || v > maxOverflowBucketMs || v%wheel.OverflowHourMs != 0 {
			return nil, invalid("bucket_ms: must be a multiple of %d (1 hour) between %d and %d (366 days), got %s",
				wheel.OverflowHourMs, wheel.OverflowHourMs, maxOverflowBucketMs, service.QuoteShort(q))
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
