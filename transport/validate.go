package transport

import (
	"errors"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// The decoding of an enqueue's body; its validation is the service's
// (service.ValidateEnqueue), whose refusals become the *Error they
// stand for.

// decodeEnqueue decodes and validates the body of POST /v1/messages. The
// batch is validated whole: the first bad message rejects it.
func decodeEnqueue(data []byte, lim Limits, nowMs int64) ([]command.NewMessage, error) {
	req, err := parseEnqueue(data, lim)
	if err != nil {
		return nil, err
	}
	return validateEnqueue(req, lim, nowMs)
}

// validateEnqueue checks every message of req (service.ValidateEnqueue),
// a refusal as the *Error it stands for.
func validateEnqueue(req api.EnqueueRequest, lim Limits, nowMs int64) ([]command.NewMessage, error) {
	msgs, err := service.ValidateEnqueue(req, lim, nowMs)
	return msgs, asError(err)
}

// asError is err as the *Error it stands for; nil stays nil.
func asError(err error) error {
	if err == nil {
		return nil
	}
	return toError(err)
}

// decodeEnqueueProto decodes the protobuf form of an enqueue request
// (api.ContentTypeProto) and validates it exactly as the JSON form.
func decodeEnqueueProto(data []byte, lim Limits, nowMs int64) ([]command.NewMessage, error) {
	req, err := api.UnmarshalEnqueueRequestProto(data, lim.MaxBatch)
	if errors.Is(err, api.ErrTooManyMessages) {
		return nil, tooLarge("%v", err)
	}
	if err != nil {
		return nil, invalid("%v", err)
	}
	msgs, err := service.ValidateEnqueueProto(req, lim, nowMs)
	return msgs, asError(err)
}

// parseEnqueue decodes an enqueue request strictly (see decodeStrict); an
// error names the field and the message's index. A batch over lim.MaxBatch
// is a 413 too_large.
func parseEnqueue(data []byte, lim Limits) (api.EnqueueRequest, error) {
	req, ok := fastEnqueue(data, lim.MaxBatch)
	if !ok {
		req = api.EnqueueRequest{}
		if err := decodeStrict(data, &req, messagesUpTo(lim.MaxBatch)); err != nil {
			return api.EnqueueRequest{}, err
		}
	}
	if err := service.CheckCount("messages", len(req.Messages), lim.MaxBatch, false); err != nil {
		return api.EnqueueRequest{}, toError(err)
	}
	return req, nil
}
