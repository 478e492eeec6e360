package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestPayload(t *testing.T) {
	for _, body := range [][]byte{nil, []byte("plain text"), {0xff, 0xfe, 0x00}} {
		p := api.PayloadOf(body)
		if (p.Body == nil) == (p.BodyBase64 == nil) {
			t.Fatalf("%q: want exactly one of body and body_base64: %+v", body, p)
		}
		got, err := p.Bytes()
		if err != nil || string(got) != string(body) {
			t.Fatalf("%q: round trip gave %q, %v", body, got, err)
		}
	}
	b, err := json.Marshal(api.MessageView{ID: "x", Payload: api.PayloadOf([]byte{0xff})})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"body"`) || !strings.Contains(string(b), `"body_base64":"/w=="`) {
		t.Fatalf("binary body should travel as body_base64 only: %s", b)
	}
	if _, err := (api.Payload{BodyBase64: api.Ptr("!!")}).Bytes(); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

func TestSlotRecordsOmittedUnlessListed(t *testing.T) {
	b, _ := json.Marshal(api.Slot{})
	if strings.Contains(string(b), "records") {
		t.Fatalf("records listed without being asked for: %s", b)
	}
	b, _ = json.Marshal(api.Slot{Records: []api.SlotRecord{}})
	if !strings.Contains(string(b), `"records":[]`) {
		t.Fatalf("asked-for empty records missing: %s", b)
	}
}
