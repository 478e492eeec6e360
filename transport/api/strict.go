package api

import (
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// checkStrict walks the protobuf message data of type md and refuses what
// the JSON form of the API refuses: unknown fields, a field given twice, a
// wrong wire type, a string that is not UTF-8, an int32 that does not fit,
// a map key given twice. It knows the schema only through md, so it follows
// delaywheel.proto as it changes; an error names the field ("messages[3].key").
func checkStrict(data []byte, md protoreflect.MessageDescriptor, where loc) error {
	var (
		seen  uint64 // singular fields met, by number (delaywheel.proto's are below 64)
		items int    // elements of the repeated message field met so far
		keys  map[string]struct{}
	)
	fields := md.Fields()
	return eachField(data, where, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		fd := fields.ByNumber(num)
		if fd == nil {
			return fmt.Errorf("%s: unknown field number %d", where, num)
		}
		path := where.child(fd, items)
		want := wireType(fd)
		switch {
		case typ != want && fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			return fmt.Errorf("%s: must be an embedded message (wire type %d), got wire type %d", path, want, typ)
		case typ != want:
			return fmt.Errorf("%s: wrong wire type %d (want %d)", path, typ, want)
		}
		switch {
		case fd.IsMap():
			if keys == nil {
				keys = map[string]struct{}{}
			}
			return checkMapEntry(raw, fd, path, keys)
		case fd.IsList():
			if fd.Kind() == protoreflect.MessageKind {
				items++
				return checkStrict(raw, fd.Message(), path)
			}
		default:
			if num < 64 && seen&(1<<num) != 0 {
				return fmt.Errorf("%s: given more than once", path)
			}
			seen |= 1 << (num % 64)
		}
		return checkScalar(fd, path, v, raw)
	})
}

// checkScalar checks one value of a singular or repeated scalar field.
func checkScalar(fd protoreflect.FieldDescriptor, path loc, v uint64, raw []byte) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.Valid(raw) {
			return fmt.Errorf("%s: must be valid UTF-8", path)
		}
	case protoreflect.Int32Kind:
		if int64(v) < math.MinInt32 || int64(v) > math.MaxInt32 {
			return fmt.Errorf("%s: must be an integer that fits int32, got %d", path, int64(v))
		}
	case protoreflect.MessageKind:
		return checkStrict(raw, fd.Message(), path)
	}
	return nil
}

// checkMapEntry checks one entry of a map<string, string> field and that
// its key was not given before in keys.
func checkMapEntry(data []byte, fd protoreflect.FieldDescriptor, path loc, keys map[string]struct{}) error {
	var (
		k       string
		seenKey bool
	)
	err := eachField(data, path, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		var sub protoreflect.FieldDescriptor
		switch num {
		case fd.MapKey().Number():
			sub = fd.MapKey()
		case fd.MapValue().Number():
			sub = fd.MapValue()
		default:
			return fmt.Errorf("%s: unknown field number %d", path, num)
		}
		if want := wireType(sub); typ != want {
			return fmt.Errorf("%s: map entry field %d: wrong wire type %d (want %d)", path, num, typ, want)
		}
		if sub == fd.MapKey() {
			seenKey, k = true, string(raw)
			return checkScalar(sub, path.with(" key"), 0, raw)
		}
		return checkScalar(sub, path.with("["+quoteKey(k, seenKey)+"]"), 0, raw)
	})
	if err != nil {
		return err
	}
	if _, dup := keys[k]; dup {
		return fmt.Errorf("%s: given more than once", path.with("["+quoteKey(k, true)+"]"))
	}
	keys[k] = struct{}{}
	return nil
}

// wireType is the wire type a field's values are sent in (unpacked).
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return protowire.BytesType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	default:
		return protowire.VarintType
	}
}

func quoteKey(k string, known bool) string {
	if !known {
		return "?"
	}
	if len(k) > 40 {
		k = k[:40] + "…"
	}
	return fmt.Sprintf("%q", k)
}

// countField counts the length-delimited fields num at the top of data; it
// stops quietly at malformed input, which the strict walk then reports.
func countField(data []byte, num protowire.Number) int {
	n := 0
	for len(data) > 0 {
		got, typ, l := protowire.ConsumeField(data)
		if l < 0 {
			break
		}
		if got == num && typ == protowire.BytesType {
			n++
		}
		data = data[l:]
	}
	return n
}

// loc names where in a request a field is, for error messages; it is turned
// into text only when there is an error to report.
type loc struct {
	list  string // the repeated field of the request the message is in
	msg   int    // message index; negative: the request itself
	field string // field name within the message
	extra string // what follows: a map key
}

// child is the location of field fd of the message at l; an element of a
// repeated message field is numbered n.
func (l loc) child(fd protoreflect.FieldDescriptor, n int) loc {
	if l.msg < 0 && fd.IsList() && fd.Kind() == protoreflect.MessageKind {
		return loc{list: string(fd.Name()), msg: n}
	}
	if l.msg < 0 {
		return loc{msg: -1, field: string(fd.Name())}
	}
	return loc{list: l.list, msg: l.msg, field: string(fd.Name())}
}

func (l loc) with(extra string) loc { l.extra = extra; return l }

func (l loc) String() string {
	if l.msg < 0 {
		if l.field != "" {
			return l.field + l.extra
		}
		return "request body"
	}
	s := fmt.Sprintf("%s[%d]", l.list, l.msg)
	if l.field != "" {
		s += "." + l.field
	}
	return s + l.extra
}

// eachField walks the fields of one protobuf message, calling fn with each
// varint value or length-delimited payload. Fixed-width fields and groups,
// which delaywheel.proto does not use, reach fn with no value, and the wire
// type check refuses them.
func eachField(data []byte, where loc, fn func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%s: malformed protobuf: %w", where, protowire.ParseError(n))
		}
		data = data[n:]
		var (
			v   uint64
			raw []byte
		)
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(data)
		case protowire.BytesType:
			raw, n = protowire.ConsumeBytes(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return fmt.Errorf("%s: malformed protobuf in field %d: %w", where, num, protowire.ParseError(n))
		}
		data = data[n:]
		if err := fn(num, typ, v, raw); err != nil {
			return err
		}
	}
	return nil
}

// CheckStrict checks the protobuf message data of type md as the HTTP API's
// protobuf body is checked (see UnmarshalEnqueueRequestProto): an unknown
// field, a field or map key given twice, a wrong wire type, a string that
// is not UTF-8 or an int32 that does not fit is an error naming the field.
func CheckStrict(data []byte, md protoreflect.MessageDescriptor) error {
	return checkStrict(data, md, loc{msg: -1})
}
