package transport

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

// FuzzDecodeEnqueue feeds arbitrary bodies to the enqueue decoder and
// validator: they must never panic, must refuse with a 400 or 413, and what
// they accept must re-encode to a body that is accepted again as the same
// batch.
func FuzzDecodeEnqueue(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"topic":"t","body":"x"}]}`,
		`{"messages":[{"topic":"a.b:c-d_e","body_base64":"/wAB","delay_ms":5,"key":"k","priority":-3,"ttr_ms":1,"max_attempts":1000,"headers":{"h":"v"}}]}`,
		`{"messages":[{"topic":"t","deliver_at_ms":0},{"topic":"u","deliver_at_ms":1732245600999}]}`,
		`{"messages":[{"topic":"t","delay_ms":1,"deliver_at_ms":1}]}`,
		`{"messages":[]}`,
		`{"messages":[null]}`,
		`{"messages":[{"topic":"t","body":"x","body_base64":"eA=="}]}`,
		`{"messages":[{"topic":"t","headers":{}}]} {}`,
	} {
		f.Add([]byte(seed))
	}
	lim := DefaultLimits()
	const nowMs = 1_732_245_600_000
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseEnqueue(data, lim)
		if err == nil {
			var msgs any
			msgs, err = validateEnqueue(req, lim, nowMs)
			if err == nil {
				again, merr := json.Marshal(req)
				if merr != nil {
					t.Fatalf("re-encode %+v: %v", req, merr)
				}
				msgs2, err2 := decodeEnqueue(again, lim, nowMs)
				if err2 != nil {
					t.Fatalf("accepted %q but refused its re-encoding %q: %v", data, again, err2)
				}
				if !reflect.DeepEqual(msgs, msgs2) {
					t.Fatalf("re-encoding changed the batch:\n%+v\n%+v", msgs, msgs2)
				}
				return
			}
		}
		var e *Error
		if !errors.As(err, &e) || (e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge) || e.Message == "" {
			t.Fatalf("refusal %v is not a 400 or 413 with a message", err)
		}
	})
}
