package api_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestEnqueueRequestRoundTrip(t *testing.T) {
	req := api.EnqueueRequest{Messages: []api.Message{
		{Topic: "t", Payload: api.TextBody("hi"), DelayMs: api.Ptr(int64(0)), Key: "k", Priority: -2,
			TTRMs: api.Ptr(int64(5)), MaxAttempts: api.Ptr(int32(3)), Headers: map[string]string{"a": "b"}},
		{Topic: "u", DeliverAtMs: api.Ptr(int64(7))},
	}}
	b, err := api.AppendEnqueueRequest(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := api.UnmarshalEnqueueRequest(b, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("got  %+v\nwant %+v", got, req)
	}
	if _, err := api.UnmarshalEnqueueRequest(b, 1); !errors.Is(err, api.ErrTooManyMessages) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := api.AppendEnqueueRequest(nil, api.EnqueueRequest{Messages: []api.Message{{Topic: "t", Payload: api.Payload{Body: api.Ptr("x"), BodyBase64: api.Ptr("eA==")}}}}); err == nil || !strings.Contains(err.Error(), "messages[0].body") {
		t.Fatalf("both bodies: %v", err)
	}
}

func TestUnmarshalEnqueueRequestStrict(t *testing.T) {
	msg := func(fields []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), fields)
	}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"unknown field", msg(protowire.AppendVarint(protowire.AppendTag(nil, 20, protowire.VarintType), 1)), "messages[0]: unknown field number 20"},
		{"repeat", msg(str(str(nil, 1, "a"), 1, "b")), "messages[0].topic: given more than once"},
		{"not UTF-8", msg(str(nil, 5, "\xff")), "messages[0].key: must be valid UTF-8"},
		{"header key", msg(str(nil, 9, string(str(nil, 1, "\xff")))), "messages[0].headers key: must be valid UTF-8"},
	} {
		if _, err := api.UnmarshalEnqueueRequest(tc.data, 10); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestEnqueueResponseRoundTrip(t *testing.T) {
	resp := api.EnqueueResponse{Results: []api.Result{{ID: "a", DeliverAtMs: 5, Duplicate: true}, {ID: "b"}}}
	got, err := api.UnmarshalEnqueueResponse(api.AppendEnqueueResponse(nil, resp))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, resp) {
		t.Fatalf("got %+v", got)
	}
}
