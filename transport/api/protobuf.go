package api

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/delaywheel/delaywheel/transport/api/pb"
)

// ContentTypeProto is the media type of the protobuf form of the enqueue
// call (schema in delaywheel.proto). POST /v1/messages accepts it as the
// request's Content-Type and answers in it when the Accept header names it.
const ContentTypeProto = "application/x-protobuf"

// ErrTooManyMessages is returned by UnmarshalEnqueueRequest when a batch
// holds more messages than the limit it was given; decoding stops there.
var ErrTooManyMessages = errors.New("too many messages")

// ProtoMessage returns the protobuf form of m. A body is sent as raw bytes,
// whichever of body and body_base64 it was given in; an invalid
// body_base64, or both set (which the JSON form refuses), is an error.
func ProtoMessage(m *Message) (*pb.Message, error) {
	if m.Body != nil && m.BodyBase64 != nil {
		// The JSON form refuses this; the protobuf form has one body
		// field, so do not silently send one of the two.
		return nil, errors.New(`body: set "body" or "body_base64", not both`)
	}
	body, err := m.Payload.Bytes()
	if err != nil {
		return nil, err
	}
	p := &pb.Message{Topic: m.Topic, Body: body, DelayMs: m.DelayMs, DeliverAtMs: m.DeliverAtMs, Key: m.Key,
		Priority: m.Priority, TtrMs: m.TTRMs, MaxAttempts: m.MaxAttempts, Headers: m.Headers}
	return p, nil
}

// ProtoEnqueueRequest returns the protobuf form of req; an error names the
// message that cannot be expressed ("messages[3].body: …").
func ProtoEnqueueRequest(req EnqueueRequest) (*pb.EnqueueRequest, error) {
	out := &pb.EnqueueRequest{Messages: make([]*pb.Message, len(req.Messages))}
	for i := range req.Messages {
		m, err := ProtoMessage(&req.Messages[i])
		if err != nil {
			return nil, fmt.Errorf("messages[%d].%w", i, err)
		}
		out.Messages[i] = m
	}
	return out, nil
}

// MessageOf returns the message p carries. An empty body is no body, as
// when the JSON form omits it.
func MessageOf(p *pb.Message) Message {
	var body string
	return messageOf(p, &body)
}

// MessageFields returns the message p carries without its body, for a
// caller that takes p's body as it is.
func MessageFields(p *pb.Message) Message { return messageOf(p, nil) }

// messageOf is MessageOf with the body copied into *body (none when body
// is nil).
func messageOf(p *pb.Message, body *string) Message {
	m := Message{Topic: p.GetTopic(), DelayMs: p.DelayMs, DeliverAtMs: p.DeliverAtMs, Key: p.GetKey(),
		Priority: p.GetPriority(), TTRMs: p.TtrMs, MaxAttempts: p.MaxAttempts, Headers: p.GetHeaders()}
	if body != nil && len(p.GetBody()) > 0 {
		*body = string(p.GetBody())
		m.Body = body
	}
	return m
}

// AppendEnqueueRequest appends the protobuf form of req to b.
func AppendEnqueueRequest(b []byte, req EnqueueRequest) ([]byte, error) {
	p, err := ProtoEnqueueRequest(req)
	if err != nil {
		return b, err
	}
	return proto.MarshalOptions{}.MarshalAppend(b, p)
}

// UnmarshalEnqueueRequest decodes the protobuf form of an enqueue request
// strictly, as the JSON form is decoded: unknown fields, a field given
// twice, wrong wire types, strings that are not UTF-8 and numbers that do
// not fit are errors naming the field ("messages[3].ttr_ms: …"). It stops
// with ErrTooManyMessages once the batch holds more than maxMessages.
func UnmarshalEnqueueRequest(data []byte, maxMessages int) (EnqueueRequest, error) {
	p, err := UnmarshalEnqueueRequestProto(data, maxMessages)
	if err != nil {
		return EnqueueRequest{}, err
	}
	return EnqueueRequest{Messages: Each(p.GetMessages(), MessageOf)}, nil
}

// UnmarshalEnqueueRequestProto is UnmarshalEnqueueRequest giving the
// generated type.
func UnmarshalEnqueueRequestProto(data []byte, maxMessages int) (*pb.EnqueueRequest, error) {
	var p pb.EnqueueRequest
	desc := p.ProtoReflect().Descriptor()
	list := desc.Fields().ByName("messages")
	if n := EnqueueMessageCount(data); n > maxMessages {
		return nil, fmt.Errorf("%s: %w: %d messages are over the limit of %d per request", list.Name(), ErrTooManyMessages, n, maxMessages)
	}
	// The generated decoder accepts what this contract refuses (unknown
	// fields, repeats, int32 overflow) and names no field when it fails, so
	// a strict walk over the schema's descriptor goes first.
	if err := checkStrict(data, desc, loc{msg: -1}); err != nil {
		return nil, err
	}
	if err := proto.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("request body: %w", err)
	}
	return &p, nil
}

// EnqueueMessageCount counts the messages of the protobuf EnqueueRequest
// data without decoding them, so that a batch over a limit can be refused
// as too large whatever its messages hold.
func EnqueueMessageCount(data []byte) int {
	return countField(data, (&pb.EnqueueRequest{}).ProtoReflect().Descriptor().Fields().ByName("messages").Number())
}

// AppendEnqueueResponse appends the protobuf form of resp to b.
func AppendEnqueueResponse(b []byte, resp EnqueueResponse) []byte {
	p := &pb.EnqueueResponse{Results: make([]*pb.Result, len(resp.Results))}
	rs := make([]pb.Result, len(resp.Results)) // one allocation for the batch
	for i, r := range resp.Results {
		rs[i].Id, rs[i].DeliverAtMs, rs[i].Duplicate = r.ID, r.DeliverAtMs, r.Duplicate
		p.Results[i] = &rs[i]
	}
	b, _ = proto.MarshalOptions{}.MarshalAppend(b, p) // cannot fail: every string is an id
	return b
}

// ResultsOf returns the results p carries.
func ResultsOf(p *pb.EnqueueResponse) []Result {
	return Each(p.GetResults(), func(r *pb.Result) Result {
		return Result{ID: r.GetId(), DeliverAtMs: r.GetDeliverAtMs(), Duplicate: r.GetDuplicate()}
	})
}

// Each converts every element of in with conv: a list of the protobuf
// form into the JSON form's, or the other way.
func Each[P, T any](in []P, conv func(P) T) []T {
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = conv(v)
	}
	return out
}

// UnmarshalEnqueueResponse decodes the protobuf form of an enqueue answer.
// Unknown fields are skipped, so that a newer server's answer still decodes.
func UnmarshalEnqueueResponse(data []byte) (EnqueueResponse, error) {
	var p pb.EnqueueResponse
	if err := proto.Unmarshal(data, &p); err != nil {
		return EnqueueResponse{}, fmt.Errorf("answer: %w", err)
	}
	return EnqueueResponse{Results: ResultsOf(&p)}, nil
}
