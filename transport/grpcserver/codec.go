package grpcserver

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
)

// strictCodec decodes the requests of the delaywheel service as strictly as
// the HTTP API decodes its bodies: a field or map key given twice, a string
// that is not UTF-8, an unknown field or an int32 that does not fit is
// refused with INVALID_ARGUMENT naming the field, and no handler sees the
// request. An Enqueue over the batch limit is RESOURCE_EXHAUSTED, its
// messages counted before any is read, as the HTTP API counts them. Other
// services' messages (health, reflection) decode as usual.
//
// Invariant: grpc-go answers any codec error INTERNAL, so a refused request
// is not an error here. The codec leaves the message empty and records the
// refusal under the message's pointer; take, which the interceptors call for
// every request message of the service before anything reads it, removes it
// and answers it. Every recorded refusal is taken once, so none is kept.
type strictCodec struct {
	base     encoding.CodecV2
	maxBatch int      // messages per Enqueue: a request over it is refused too large
	refused  sync.Map // request message (a pointer) → error
}

func newStrictCodec(maxBatch int) *strictCodec {
	return &strictCodec{base: encoding.GetCodecV2(grpcproto.Name), maxBatch: maxBatch}
}

// Name is the codec's content subtype: that of the codec it stands for.
func (c *strictCodec) Name() string { return c.base.Name() }

// Marshal encodes as the protobuf codec does.
func (c *strictCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal decodes data into v, a request message, recording a refusal of
// a message of the service instead of decoding it.
func (c *strictCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok || string(m.ProtoReflect().Descriptor().ParentFile().Package()) != "delaywheel.v1" {
		return c.base.Unmarshal(data, v)
	}
	b := data.Materialize()
	if _, isEnqueue := m.(*pb.EnqueueRequest); isEnqueue {
		// Counted first, as the HTTP API counts a batch: one over the
		// limit is too large whatever its messages past the limit hold.
		if err := service.CheckCount("messages", api.EnqueueMessageCount(b), c.maxBatch, true); err != nil {
			c.refused.Store(v, err)
			return nil
		}
	}
	if err := api.CheckStrict(b, m.ProtoReflect().Descriptor()); err != nil {
		c.refused.Store(v, service.Invalid("%v", err))
		return nil
	}
	return proto.Unmarshal(b, m)
}

// take returns, as an INVALID_ARGUMENT status, the refusal recorded for
// the request message v, and forgets it; nil when v was decoded.
func (c *strictCodec) take(v any) error {
	err, ok := c.refused.LoadAndDelete(v)
	if !ok {
		return nil
	}
	return asStatus(err.(error))
}

// strictStream answers a refused message of a stream as take does.
type strictStream struct {
	grpc.ServerStream
	codec *strictCodec
}

// RecvMsg receives the next message of the stream into m.
func (s strictStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.take(m)
}
