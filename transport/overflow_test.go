package transport_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestWheelOverflow(t *testing.T) {
	e := newEnv(t)
	const hour = int64(3_600_000)
	var msgs []api.Message
	for _, d := range []int64{3 * hour, 3*hour + 1, 5 * hour, 30 * hour} {
		msgs = append(msgs, api.Message{Topic: "o", Payload: api.TextBody("x"), DelayMs: api.Ptr(d)})
	}
	msgs = append(msgs, api.Message{Topic: "o", Payload: api.TextBody("near"), DelayMs: api.Ptr(int64(1000))})
	e.mustEnqueue(msgs...)
	first := (startMs + 3*hour) / hour * hour

	get := func(query string) api.Overflow {
		t.Helper()
		a := e.do(http.MethodGet, "/v1/wheel/overflow"+query, "")
		equal(t, "status "+query, a.status, http.StatusOK)
		var o api.Overflow
		check(t, "decode", json.Unmarshal(a.body, &o))
		return o
	}
	o := get("")
	equal(t, "bucket", o.BucketMs, hour)
	equal(t, "total", o.Total, int64(4))
	equal(t, "buckets", len(o.Buckets), 3)
	equal(t, "first", o.Buckets[0], api.OverflowBucket{StartMs: first, Messages: 2})
	equal(t, "last", o.Buckets[2].Messages, int64(1))

	o = get("?bucket_ms=3600000&limit=2")
	equal(t, "limited", len(o.Buckets), 2)
	equal(t, "beyond", o.Beyond, int64(1))

	o = get("?bucket_ms=" + itoa(366*24*hour))
	var sum int64
	for _, b := range o.Buckets {
		sum += b.Messages
	}
	equal(t, "one-year buckets hold all", sum, int64(4))

	for _, c := range []struct{ query, field string }{
		{"?bucket_ms=0", "bucket_ms"},
		{"?bucket_ms=1800000", "bucket_ms"},
		{"?bucket_ms=3600001", "bucket_ms"},
		{"?bucket_ms=x", "bucket_ms"},
		{"?bucket_ms=" + itoa(367*24*hour), "bucket_ms"},
		{"?limit=0", "limit"},
		{"?limit=10001", "limit"},
	} {
		a := e.do(http.MethodGet, "/v1/wheel/overflow"+c.query, "")
		equal(t, "status "+c.query, a.status, http.StatusBadRequest)
		if d := a.errBody(t); d.Code != api.CodeInvalidArgument || !strings.HasPrefix(d.Message, c.field+":") {
			t.Fatalf("%s: %+v, want invalid_argument naming %s", c.query, d, c.field)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
