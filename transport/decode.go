package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// readBody reads the request body, which the server has already bounded with
// http.MaxBytesReader.
func readBody(r *http.Request) ([]byte, error) {
	data, err := readAllSized(r.Body, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge("request body: over the limit of %s", service.LimitBytes(mbe.Limit))
		}
		return nil, invalid("request body: could not be read: %v", err)
	}
	return data, nil
}

// maxBodyPrealloc bounds the buffer readAllSized sizes from a request's
// Content-Length before a byte arrived: a client cannot make the server
// reserve more than this by announcing a large body it never sends.
const maxBodyPrealloc = 1 << 20

// readAllSized reads r to its end like io.ReadAll, but into a buffer sized
// from the announced length (up to maxBodyPrealloc), so that a body is read
// without copying it over and over as the buffer doubles. The extra
// bytes.MinRead is the room ReadFrom wants free to read the end.
func readAllSized(r io.Reader, announced int64) ([]byte, error) {
	size := 0
	if announced > 0 {
		size = int(min(announced, maxBodyPrealloc))
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// decodeBody reads the request body and decodes it strictly into v. An empty
// body is an error unless allowEmpty, in which case v keeps its zero value.
func decodeBody(r *http.Request, v any, allowEmpty bool) error {
	data, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeData(data, v, allowEmpty)
}

// decodeData decodes a body read already as decodeBody does.
func decodeData(data []byte, v any, allowEmpty bool) error {
	if allowEmpty && len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return decodeStrict(data, v)
}

// decodeStrict decodes exactly one JSON value from data into v. It refuses
// what the API does not define, rather than read it one way: a member name
// v does not have (names match exactly, in case too), a name given twice
// in an object (at any depth), and a string that is not valid UTF-8 (raw,
// or an escaped half of a surrogate pair), which encoding/json would store
// changed, as U+FFFD. An error names the field as the API does
// ("messages[2].body", "messages[0].headers[\"X-A\"]").
func decodeStrict(data []byte, v any, opts ...jsonv2.Options) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	if err := jsonv2.UnmarshalDecode(dec, v, append(opts, jsonv2.RejectUnknownMembers(true))...); err != nil {
		return jsonError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return invalid("request body: must hold exactly one JSON value, found more after it")
	}
	return nil
}

// notUTF8 reports whether a syntax error is a string that is not valid
// UTF-8: raw bytes, or an escaped surrogate without its pair. jsontext does
// not export these errors, so their text tells them (TestValidation holds
// the messages).
func notUTF8(err error) bool {
	return err != nil && (err.Error() == "invalid UTF-8" || strings.HasPrefix(err.Error(), "invalid surrogate pair"))
}

// messagesUpTo decodes a list of messages (an enqueue's) of up to max
// messages; a longer one is a 413 too_large, and its messages past max are
// only counted, not decoded: a batch over the limit costs no more memory
// than one at it.
func messagesUpTo(max int) jsonv2.Options {
	return jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, msgs *[]api.Message) error {
		if dec.PeekKind() != '[' {
			return jsonv2.SkipFunc // null or the wrong type: the default decoding reads or refuses it
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		n := 0
		for ; dec.PeekKind() != ']'; n++ {
			if n >= max {
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			*msgs = append(*msgs, api.Message{})
			if err := jsonv2.UnmarshalDecode(dec, &(*msgs)[n]); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		return service.CheckCount("messages", n, max, true)
	}))
}

// jsonError turns a decoding error into a 400 that names the field.
func jsonError(err error) *Error {
	var (
		syn *jsontext.SyntacticError
		sem *jsonv2.SemanticError
		own *Error
		svc *service.Error
	)
	switch {
	case errors.As(err, &own):
		return own // a decoder of this package's refused the value
	case errors.As(err, &svc):
		return ToError(svc) // a check of the service's refused the value
	case errors.Is(err, io.EOF):
		return invalid("request body: is empty; expected a JSON object")
	case errors.As(err, &syn):
		at := apiPath(syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return invalid("%s: malformed JSON: unexpected end of input", at)
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return invalid("%s: given more than once", at)
		case notUTF8(syn.Err):
			if field := syn.JSONPointer.LastToken(); field == "body" {
				return invalid("%s: must be valid UTF-8; send other bytes as \"body_base64\"", at)
			}
			return invalid("%s: must be valid UTF-8", at)
		}
		return invalid("%s: malformed JSON at byte %d: %v", at, syn.ByteOffset, syn.Err)
	case errors.As(err, &sem):
		if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			return invalid("%s: unknown field %s", apiPath(sem.JSONPointer.Parent()), service.QuoteShort(sem.JSONPointer.LastToken()))
		}
		got := "JSON " + kindName(sem.JSONKind)
		if len(sem.JSONValue) > 0 {
			got += " " + string(sem.JSONValue)
		}
		if sem.GoType == nil {
			return invalid("%s: cannot take %s", apiPath(sem.JSONPointer), got)
		}
		return invalid("%s: must be %s, got %s", apiPath(sem.JSONPointer), jsonKind(sem.GoType), got)
	default:
		return invalid("request body: malformed JSON: %v", err)
	}
}

// apiPath names the value at p as the API's errors name fields:
// "/messages/2/headers/X-A" is "messages[2].headers[\"X-A\"]", and the
// root is "request body". A number names an element of a list, except as
// a key of a map (an object of free keys: "headers").
func apiPath(p jsontext.Pointer) string {
	var b strings.Builder
	parent := ""
	for tok := range p.Tokens() {
		switch {
		case parent == "headers":
			b.WriteString("[" + service.QuoteShort(tok) + "]")
		case tok != "" && strings.Trim(tok, "0123456789") == "":
			b.WriteString("[" + tok + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
		}
		parent = tok
	}
	if b.Len() == 0 {
		return "request body"
	}
	return b.String()
}

// kindName names a kind of JSON value.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	default:
		return k.String() // null, false, true, string, number
	}
}

// jsonKind names the JSON shape a Go type wants.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer that fits %s", t.Kind())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a non-negative integer that fits %s", t.Kind())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return t.String()
	}
}

// isMediaType reports whether a Content-Type header names the media type
// want, ignoring parameters and case.
func isMediaType(header, want string) bool {
	mt, _, _ := strings.Cut(header, ";")
	return strings.EqualFold(strings.TrimSpace(mt), want)
}

// acceptsMediaType reports whether an Accept header lists want explicitly
// with a non-zero quality. Wildcards do not count: JSON stays the answer
// for clients that did not ask for anything else.
func acceptsMediaType(header, want string) bool {
	for _, part := range strings.Split(header, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || !strings.EqualFold(mt, want) {
			continue
		}
		q, err := strconv.ParseFloat(params["q"], 64)
		return params["q"] == "" || err == nil && q > 0
	}
	return false
}

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
	return ToError(err)
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
			if n, ok := countMessages(data); ok && n > lim.MaxBatch {
				// Over the limit whatever its messages hold, as a
				// protobuf body is: not the first bad message's 400.
				return api.EnqueueRequest{}, ToError(service.CheckCount("messages", n, lim.MaxBatch, true))
			}
			return api.EnqueueRequest{}, err
		}
	}
	if err := service.CheckCount("messages", len(req.Messages), lim.MaxBatch, false); err != nil {
		return api.EnqueueRequest{}, ToError(err)
	}
	return req, nil
}

// countMessages counts the elements of the "messages" list of an enqueue
// body that decodeStrict refused, reading past what it refuses but for
// malformed JSON: names given twice, strings that are not UTF-8, unknown
// fields and wrong types. ok is false when the body is no JSON object or
// holds no such list.
func countMessages(data []byte) (n int, ok bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return 0, false
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			return 0, false
		}
		if name.String() != "messages" || dec.PeekKind() != '[' {
			if dec.SkipValue() != nil {
				return 0, false
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return 0, false
		}
		for dec.PeekKind() != ']' {
			if dec.SkipValue() != nil {
				return 0, false
			}
			n++
		}
		return n, true
	}
	return 0, false
}
