package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/delaywheel/delaywheel/transport/service"
)

// readBody reads the request body, which the server has already bounded with
// http.MaxBytesReader.
func readBody(r *http.Request) ([]byte, error) {
	data, err := readAllSized(r.Body, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge("request body: over the limit of %d bytes (%s)", mbe.Limit, service.HumanBytes(mbe.Limit))
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
	if allowEmpty && len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return decodeStrict(data, v, "")
}

// decodeStrict decodes exactly one JSON value from data into v, rejecting
// unknown fields. where names the value in error messages ("" for the
// request body, or "messages[3]").
func decodeStrict(data []byte, v any, where string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, where)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("%s: must hold exactly one JSON value, found more after it", fieldPath(where, ""))
	}
	return nil
}

// jsonError turns a decoding error into a 400 that names the field.
func jsonError(err error, where string) *Error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return invalid("%s: is empty; expected a JSON object", fieldPath(where, ""))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("%s: malformed JSON: unexpected end of input", fieldPath(where, ""))
	case errors.As(err, &syn):
		return invalid("%s: malformed JSON at byte %d: %s", fieldPath(where, ""), syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		return invalid("%s: must be %s, got JSON %s", fieldPath(where, typ.Field), jsonKind(typ.Type), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalid("%s: %s", fieldPath(where, ""), strings.TrimPrefix(err.Error(), "json: "))
	default:
		return invalid("%s: malformed JSON: %s", fieldPath(where, ""), strings.TrimPrefix(err.Error(), "json: "))
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

// fieldPath joins a location and a field name (service.FieldPath).
func fieldPath(where, field string) string { return service.FieldPath(where, field) }

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
