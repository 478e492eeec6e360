package transport

import (
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestAppendDelivery holds appendDelivery and appendReserved to what
// encoding/json writes of the wire types, for bodies, headers, keys and
// topics that need escapes, are not UTF-8 or are empty.
func TestAppendDelivery(t *testing.T) {
	texts := []string{"", "plain", `q"uo\te`, "tab\tnl\n\x01\x1f", "<&>", "é ü 日本", "\u2028\u2029", "bad\xffutf8"}
	var ds []model.Delivery
	for i, s := range texts {
		r := model.Receipt{ID: model.ID{Index: uint64(i) << 40, Seq: uint32(i) * 977}, Nonce: ^uint64(i)}
		m := model.Message{ID: r.ID, Topic: "t" + s, Key: s, Body: []byte(s), Priority: int64(i) - 3,
			DeliverAtMs: 1 << 42, LeaseExpiresMs: int64(i), Headers: map[string]string{"X-" + s: s, "A": "b"}}
		if i%3 == 0 {
			m.Headers = nil
		}
		ds = append(ds, model.Delivery{Message: m, Attempt: int32(i), Receipt: r})
	}
	want := make([]api.Delivery, len(ds))
	for i, d := range ds {
		want[i] = api.Delivery{ID: d.ID.String(), Topic: d.Topic, Payload: api.PayloadOf(d.Body), Headers: headersOf(d.Headers),
			Key: d.Key, Priority: d.Priority, DeliverAtMs: d.DeliverAtMs, Attempt: d.Attempt, Receipt: d.Receipt.String(),
			LeaseExpiresMs: d.LeaseExpiresMs}
		w, err := marshalJSON(want[i])
		if err != nil {
			t.Fatal(err)
		}
		if got := appendDelivery(nil, d); string(got) != string(w) {
			t.Errorf("delivery %d:\n got %s\nwant %s", i, got, w)
		}
	}
	for _, n := range []int{0, 1, len(ds)} {
		w, err := marshalJSON(api.ReserveResponse{Messages: want[:n]})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendReserved(nil, ds[:n]); string(got) != string(w) {
			t.Errorf("reserve of %d:\n got %s\nwant %s", n, got, w)
		}
	}
}
