package wheel_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// codecCommandTypes has one zero value of every command type. The test
// TestCodecEveryKindCovered keeps it in step with the kinds.
var codecCommandTypes = []command.Command{
	command.Schedule{},
	command.Cancel{},
	command.Reschedule{},
	command.Lease{},
	command.Ack{},
	command.Nack{},
	command.Touch{},
	command.Expire{},
	command.Promote{},
	command.Redrive{},
	command.SetNode{},
	command.SetNode{Node: model.Member{GRPCAddr: "g:1"}}, // KindSetNodeGRPC
	command.RemoveNode{},
	command.Bury{},
	command.SetWebhook{},
	command.DeleteWebhook{},
	command.SetSchedule{},
	command.DeleteSchedule{},
	command.AdvanceSchedules{},
	command.DeadLetter{},
	command.LeaseBuried{},
}

// codecFill sets every field reachable from v to a distinct non-zero value:
// strings, integers (some negative), byte slices, two-element slices and
// two-entry maps. A field the codec forgets then fails the round trip.
func codecFill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d-é", *n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x := int64(*n) * 1000003
		if *n%2 == 0 {
			x = -x
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n) * 7919)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(fmt.Sprintf("\x00body %d\xff", *n)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			codecFill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := 0; i < 2; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			codecFill(k, n)
			e := reflect.New(v.Type().Elem()).Elem()
			codecFill(e, n)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				codecFill(v.Field(i), n)
			}
		}
	default:
		panic(fmt.Sprintf("codecFill: unhandled kind %v", v.Kind()))
	}
}

// codecFilled returns a copy of c with every field set.
func codecFilled(c command.Command, n *int) command.Command {
	v := reflect.New(reflect.TypeOf(c)).Elem()
	codecFill(v, n)
	return v.Interface().(command.Command)
}

func TestCodecEveryKindCovered(t *testing.T) {
	seen := map[command.Kind]string{}
	for _, c := range codecCommandTypes {
		k := c.Kind()
		if prev, ok := seen[k]; ok {
			t.Errorf("%T and %s share kind %d", c, prev, k)
		}
		seen[k] = fmt.Sprintf("%T", c)
	}
	for k := command.KindSchedule; k <= command.KindBury; k++ {
		if _, ok := seen[k]; !ok {
			t.Errorf("kind %d has no command in codecCommandTypes", k)
		}
	}
	for k := command.KindSetWebhook; k <= command.KindDeleteWebhook; k++ {
		if _, ok := seen[k]; !ok {
			t.Errorf("kind %d has no command in codecCommandTypes", k)
		}
	}
	for k := command.KindSetSchedule; k <= command.KindLeaseBuried; k++ {
		if _, ok := seen[k]; !ok {
			t.Errorf("kind %d has no command in codecCommandTypes", k)
		}
	}
	// The first kind after the last known one is rejected.
	var next byte
	for k := range seen {
		next = max(next, byte(k)+1)
	}
	if _, err := command.DecodeCommands([]byte{1, 1, next}); !errors.Is(err, command.ErrCorruptCommand) {
		t.Errorf("DecodeCommands of kind %d = %v; want ErrCorruptCommand (add the new command to codecCommandTypes)", next, err)
	}
}

// TestCodecCommandEveryField round-trips each command type with every field
// set, alone and all together in one entry.
func TestCodecCommandEveryField(t *testing.T) {
	n := 0
	var all []command.Command
	for _, zero := range codecCommandTypes {
		c := codecFilled(zero, &n)
		all = append(all, c)
		t.Run(fmt.Sprintf("%T", zero), func(t *testing.T) {
			b := command.EncodeCommands([]command.Command{c})
			got, err := command.DecodeCommands(b)
			if err != nil {
				t.Fatalf("DecodeCommands: %v", err)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], c) {
				t.Errorf("round trip lost data:\n got %#v\nwant %#v", got, c)
			}
		})
	}
	got, err := command.DecodeCommands(command.EncodeCommands(all))
	if err != nil {
		t.Fatalf("DecodeCommands(all): %v", err)
	}
	if len(got) != len(all) {
		t.Fatalf("decoded %d commands, encoded %d", len(got), len(all))
	}
	for i := range all {
		if !reflect.DeepEqual(got[i], all[i]) {
			t.Errorf("command %d of one entry lost data:\n got %#v\nwant %#v", i, got[i], all[i])
		}
	}
}

func codecID(index uint64, seq uint32) model.ID { return model.ID{Index: index, Seq: seq} }

func TestCodecCommandRoundTrip(t *testing.T) {
	receipts := []model.Receipt{{ID: codecID(1, 0), Nonce: 0}, {ID: codecID(math.MaxUint64, math.MaxUint32), Nonce: math.MaxUint64}}
	tests := []struct {
		name string
		cmds []command.Command
		want []command.Command // nil: same as cmds
	}{
		{name: "no commands", cmds: nil, want: []command.Command{}},
		{
			name: "schedule",
			cmds: []command.Command{command.Schedule{NowMs: 1_700_000_000_000, Messages: []command.NewMessage{
				{
					Topic: "orders", Key: "order-17", Body: []byte(`{"id":17}`),
					Headers:  map[string]string{"content-type": "application/json", "trace": "abc", "": "empty key"},
					Priority: -5, DeliverAtMs: 1_700_000_060_000, TTRMs: 30_000, MaxAttempts: 5,
				},
				{Topic: "t", Body: []byte{0, 1, 2, 0xff}, Headers: map[string]string{"k": ""}, Priority: math.MaxInt64, DeliverAtMs: math.MinInt64, TTRMs: 1, MaxAttempts: math.MaxInt32},
				{Topic: "ü/トピック", MaxAttempts: math.MinInt32},
			}}},
		},
		{
			name: "schedule with empty parts",
			cmds: []command.Command{command.Schedule{NowMs: 0, Messages: nil}, command.Schedule{Messages: []command.NewMessage{{Body: []byte{}, Headers: map[string]string{}}}}},
			// Empty bodies and header maps decode as nil, no messages as an empty slice.
			want: []command.Command{command.Schedule{Messages: []command.NewMessage{}}, command.Schedule{Messages: []command.NewMessage{{}}}},
		},
		{
			name: "cancel",
			cmds: []command.Command{
				command.Cancel{ID: codecID(12345, 3)},
				command.Cancel{Topic: "orders", Key: "order-17"},
				command.Cancel{ID: codecID(1, 1), Topic: "x", Key: strings.Repeat("k", 1000)},
			},
		},
		{
			name: "reschedule",
			cmds: []command.Command{command.Reschedule{ID: codecID(9, 9), DeliverAtMs: 1_700_000_000_999}, command.Reschedule{ID: codecID(1, 0), DeliverAtMs: -1}},
		},
		{
			name: "lease",
			cmds: []command.Command{command.Lease{NowMs: 1000, Items: []command.LeaseItem{
				{ID: codecID(5, 0), Nonce: 0xdeadbeefcafef00d, ExpiresMs: 31000, RedeliverMs: 32000},
				{ID: codecID(5, 1), Nonce: 1, ExpiresMs: math.MaxInt64, RedeliverMs: math.MaxInt64},
			}}},
		},
		{
			name: "lease without items",
			cmds: []command.Command{command.Lease{NowMs: 1000}},
			want: []command.Command{command.Lease{NowMs: 1000, Items: []command.LeaseItem{}}},
		},
		{name: "ack", cmds: []command.Command{command.Ack{NowMs: 77, Receipts: receipts}}},
		{
			name: "ack without receipts",
			cmds: []command.Command{command.Ack{NowMs: 77}},
			want: []command.Command{command.Ack{NowMs: 77, Receipts: []model.Receipt{}}},
		},
		{name: "nack", cmds: []command.Command{command.Nack{NowMs: 78, DelayMs: 5000, Receipts: receipts}, command.Nack{NowMs: -1, DelayMs: -1, Receipts: receipts[:1]}}},
		{name: "touch", cmds: []command.Command{command.Touch{NowMs: 79, Receipts: receipts}}},
		{name: "bury", cmds: []command.Command{command.Bury{NowMs: 80, Receipts: receipts}}},
		{name: "expire", cmds: []command.Command{command.Expire{Before: 1_700_000_000}, command.Expire{Before: 0}, command.Expire{Before: -7}}},
		{name: "promote", cmds: []command.Command{command.Promote{Before: 1_700_007_200}, command.Promote{Before: math.MinInt64}}},
		{name: "redrive by id", cmds: []command.Command{command.Redrive{NowMs: 5, Topic: "dlq", IDs: []model.ID{codecID(1, 2), codecID(3, 4)}}}},
		{name: "redrive all", cmds: []command.Command{command.Redrive{NowMs: 5, Topic: "dlq"}}},
		{
			name: "set node",
			cmds: []command.Command{command.SetNode{Node: model.Member{ID: "n1", RaftAddr: "10.0.0.1:7000", HTTPAddr: "http://10.0.0.1:8080"}}, command.SetNode{}},
		},
		{
			name: "set node with its gRPC address",
			cmds: []command.Command{command.SetNode{Node: model.Member{ID: "n1", RaftAddr: "10.0.0.1:7000", HTTPAddr: "10.0.0.1:8080", GRPCAddr: "10.0.0.1:7070"}}},
		},
		{name: "remove node", cmds: []command.Command{command.RemoveNode{ID: "n1"}, command.RemoveNode{}}},
		{
			name: "mixed batch",
			cmds: []command.Command{
				command.Expire{Before: 100},
				command.Promote{Before: 7300},
				command.Schedule{NowMs: 100_000, Messages: []command.NewMessage{{Topic: "a", Body: []byte("x"), DeliverAtMs: 101_000}}},
				command.Ack{NowMs: 100_000, Receipts: receipts},
				command.RemoveNode{ID: "gone"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == nil {
				want = tt.cmds
			}
			b := command.EncodeCommands(tt.cmds)
			if len(b) == 0 || b[0] != 1 {
				t.Fatalf("encoding %x does not start with entry version 1", b)
			}
			got, err := command.DecodeCommands(b)
			if err != nil {
				t.Fatalf("DecodeCommands: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, want)
			}
			// The encoding is a fixed point: re-encoding the decoded commands
			// gives the same bytes.
			if again := command.EncodeCommands(got); !bytes.Equal(again, b) {
				t.Errorf("re-encoding differs:\n first %x\nsecond %x", b, again)
			}
		})
	}
}

func TestCodecHeadersEncodeDeterministically(t *testing.T) {
	h := map[string]string{}
	for i := 0; i < 50; i++ {
		h[fmt.Sprintf("key-%02d", 49-i)] = fmt.Sprint(i)
	}
	cmd := []command.Command{command.Schedule{Messages: []command.NewMessage{{Topic: "t", Headers: h}}}}
	first := command.EncodeCommands(cmd)
	msg := &model.Message{ID: codecID(1, 0), Headers: h}
	firstMsg := wheel.EncodeMessage(nil, msg)
	for i := 0; i < 20; i++ {
		if b := command.EncodeCommands(cmd); !bytes.Equal(b, first) {
			t.Fatal("EncodeCommands is not deterministic for a message with headers")
		}
		if b := wheel.EncodeMessage(nil, msg); !bytes.Equal(b, firstMsg) {
			t.Fatal("EncodeMessage is not deterministic for a message with headers")
		}
	}
	// Headers are written sorted by key.
	if i, j := bytes.Index(first, []byte("key-00")), bytes.Index(first, []byte("key-49")); i < 0 || j < 0 || i > j {
		t.Errorf("headers not sorted by key in the encoding (key-00 at %d, key-49 at %d)", i, j)
	}
}

func TestCodecEncodeUnknownCommandPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("EncodeCommands of an unknown command type did not panic")
		}
	}()
	command.EncodeCommands([]command.Command{codecForeignCommand{}})
}

type codecForeignCommand struct{}

func (codecForeignCommand) Kind() command.Kind { return 200 }

// codecSampleEntry is an encoded entry holding every command type with every
// field set.
func codecSampleEntry() []byte {
	n := 0
	var all []command.Command
	for _, c := range codecCommandTypes {
		all = append(all, codecFilled(c, &n))
	}
	return command.EncodeCommands(all)
}

func TestCodecDecodeCommandsTruncated(t *testing.T) {
	entries := [][]byte{codecSampleEntry()}
	for _, c := range codecCommandTypes {
		n := 0
		entries = append(entries, command.EncodeCommands([]command.Command{codecFilled(c, &n)}))
	}
	for _, b := range entries {
		for cut := 0; cut < len(b); cut++ {
			cmds, err := command.DecodeCommands(b[:cut])
			if !errors.Is(err, command.ErrCorruptCommand) {
				t.Fatalf("DecodeCommands of %d of %d bytes (%x) = %v, %v; want ErrCorruptCommand", cut, len(b), b[:cut], cmds, err)
			}
			if cmds != nil {
				t.Fatalf("DecodeCommands returned commands with an error")
			}
		}
	}
}

func TestCodecDecodeCommandsErrors(t *testing.T) {
	valid := command.EncodeCommands([]command.Command{command.Expire{Before: 5}})
	uv := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	sv := func(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }
	// A schedule of one message whose max_attempts is out of int32 range.
	bigAttempts := []byte{1, 1, byte(command.KindSchedule)}
	bigAttempts = sv(bigAttempts, 0)               // now
	bigAttempts = uv(bigAttempts, 1)               // one message
	bigAttempts = append(bigAttempts, 0, 0, 0, 0)  // topic, key, body, no headers
	bigAttempts = append(bigAttempts, 0, 0, 0)     // priority, deliver_at, ttr
	bigAttempts = sv(bigAttempts, math.MaxInt32+1) // max_attempts
	bigAttemptsOK := append([]byte(nil), bigAttempts...)
	bigAttemptsOK = bigAttemptsOK[:len(bigAttemptsOK)-len(sv(nil, math.MaxInt32+1))]
	bigAttemptsOK = sv(bigAttemptsOK, math.MaxInt32) // the same entry, in range
	if _, err := command.DecodeCommands(bigAttemptsOK); err != nil {
		t.Fatalf("hand-built schedule entry does not decode: %v", err)
	}

	tests := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"nil", nil, "byte"},
		{"empty", []byte{}, "byte"},
		{"version zero", []byte{0, 0}, "entry version 0"},
		{"version two", append([]byte{2}, valid[1:]...), "entry version 2"},
		{"no count", []byte{1}, "uvarint"},
		{"count over the input", uv([]byte{1}, 5), "count"},
		{"huge count", uv([]byte{1}, 1<<62), "count"},
		{"overflowing uvarint", append([]byte{1}, bytes.Repeat([]byte{0xff}, 11)...), "uvarint"},
		{"unknown kind zero", []byte{1, 1, 0}, "unknown command kind 0"},
		{"unknown kind 255", []byte{1, 1, 255}, "unknown command kind 255"},
		{"trailing byte", append(append([]byte(nil), valid...), 0), "1 trailing bytes"},
		{"fewer commands than counted", append([]byte{1, 2}, valid[2:]...), "byte"},
		{"huge message count", uv([]byte{1, 1, byte(command.KindSchedule), 0}, 1<<40), "count"},
		{"huge header count", uv([]byte{1, 1, byte(command.KindSchedule), 0, 1, 0, 0, 0}, 1<<40), "count"},
		{"string longer than the input", uv([]byte{1, 1, byte(command.KindRemoveNode)}, 10), "bytes"},
		{"max attempts over int32", bigAttempts, "int32"},
		{"short id", []byte{1, 1, byte(command.KindReschedule), 0, 0, 0}, "bytes"},
		{"short nonce", append(append([]byte{1, 1, byte(command.KindAck), 0, 1}, make([]byte, model.IDLen)...), 1, 2, 3), "count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmds, err := command.DecodeCommands(tt.b)
			if !errors.Is(err, command.ErrCorruptCommand) {
				t.Fatalf("DecodeCommands(%x) = %#v, %v; want ErrCorruptCommand", tt.b, cmds, err)
			}
			if cmds != nil {
				t.Errorf("commands returned with an error: %#v", cmds)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestCodecMessageRoundTrip(t *testing.T) {
	n := 0
	var full model.Message
	codecFill(reflect.ValueOf(&full).Elem(), &n)
	tests := []struct {
		name string
		m    model.Message
		want model.Message
	}{
		{name: "every field set", m: full, want: full},
		{
			name: "typical",
			m: model.Message{
				ID: codecID(1234, 2), Topic: "orders", Key: "order-17", Body: []byte(`{"id":17}`),
				Headers:  map[string]string{"content-type": "application/json", "x-trace": "t-1", "": ""},
				Priority: 3, DeliverAtMs: 1_700_000_060_000, TTRMs: 30_000, MaxAttempts: 5, Attempts: 2,
				EnqueuedMs: 1_700_000_000_000, Receipt: 0xfeedface, LeaseExpiresMs: 1_700_000_090_000,
			},
		},
		{
			name: "extremes",
			m: model.Message{
				ID: codecID(math.MaxUint64, math.MaxUint32), Body: bytes.Repeat([]byte{0, 0xff}, 5000),
				Priority: math.MinInt64, DeliverAtMs: math.MaxInt64, TTRMs: -1, MaxAttempts: math.MinInt32, Attempts: math.MaxInt32,
				EnqueuedMs: math.MinInt64, Receipt: math.MaxUint64, LeaseExpiresMs: math.MaxInt64,
			},
		},
		{name: "zero", m: model.Message{}},
		{
			name: "empty body and headers",
			m:    model.Message{ID: codecID(1, 0), Body: []byte{}, Headers: map[string]string{}},
			want: model.Message{ID: codecID(1, 0)}, // decoded as nil
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if reflect.ValueOf(want).IsZero() {
				want = tt.m
			}
			b := wheel.EncodeMessage(nil, &tt.m)
			got, err := wheel.DecodeMessage(b)
			if err != nil {
				t.Fatalf("DecodeMessage: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, want)
			}
			if again := wheel.EncodeMessage(nil, &got); !bytes.Equal(again, b) {
				t.Errorf("re-encoding differs:\n first %x\nsecond %x", b, again)
			}

			// EncodeMessage appends to dst.
			prefix := []byte("prefix")
			withPrefix := wheel.EncodeMessage(append([]byte(nil), prefix...), &tt.m)
			if !bytes.Equal(withPrefix[:len(prefix)], prefix) || !bytes.Equal(withPrefix[len(prefix):], b) {
				t.Errorf("EncodeMessage(dst) = %x, want %x%x", withPrefix, prefix, b)
			}
		})
	}
}

func TestCodecDecodeMessageBodyDoesNotAliasInput(t *testing.T) {
	b := wheel.EncodeMessage(nil, &model.Message{ID: codecID(1, 0), Body: []byte("body")})
	m, err := wheel.DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'X'
	}
	if string(m.Body) != "body" {
		t.Errorf("decoded body changed with its input: %q", m.Body)
	}
}

func TestCodecDecodeMessageErrors(t *testing.T) {
	n := 0
	var full model.Message
	codecFill(reflect.ValueOf(&full).Elem(), &n)
	b := wheel.EncodeMessage(nil, &full)
	for cut := 0; cut < len(b); cut++ {
		m, err := wheel.DecodeMessage(b[:cut])
		if !errors.Is(err, command.ErrCorruptCommand) {
			t.Fatalf("DecodeMessage of %d of %d bytes = %#v, %v; want ErrCorruptCommand", cut, len(b), m, err)
		}
		if !reflect.ValueOf(m).IsZero() {
			t.Fatalf("DecodeMessage returned a message with an error: %#v", m)
		}
	}

	// attempts (the field after max_attempts) out of int32 range.
	zero := wheel.EncodeMessage(nil, &model.Message{})
	// version, id, topic, key, body, headers, priority, deliver, ttr, max_attempts
	attemptsAt := 1 + model.IDLen + 4 + 4
	if zero[attemptsAt] != 0 {
		t.Fatalf("layout changed: byte %d of a zero message is %d", attemptsAt, zero[attemptsAt])
	}
	bigAttempts := append(append(append([]byte(nil), zero[:attemptsAt]...), binary.AppendVarint(nil, math.MinInt32-1)...), zero[attemptsAt+1:]...)

	tests := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"wrong version", append([]byte{2}, b[1:]...), "version 2"},
		{"version zero", append([]byte{0}, b[1:]...), "version 0"},
		{"trailing bytes", append(append([]byte(nil), b...), 1, 2), "2 trailing bytes"},
		{"attempts under int32", bigAttempts, "int32"},
		{"a command entry", command.EncodeCommands([]command.Command{command.Expire{Before: 1}}), "corrupt command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := wheel.DecodeMessage(tt.b)
			if !errors.Is(err, command.ErrCorruptCommand) {
				t.Fatalf("DecodeMessage = %#v, %v; want ErrCorruptCommand", m, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestCodecTombstone(t *testing.T) {
	for _, id := range []model.ID{codecID(1, 0), codecID(math.MaxUint64, math.MaxUint32), codecID(0x0102030405060708, 0x090a0b0c)} {
		b := wheel.EncodeTombstone(id)
		if len(b) != 1+model.IDLen {
			t.Errorf("tombstone of %v is %d bytes, want %d", id, len(b), 1+model.IDLen)
		}
		got, err := wheel.DecodeTombstone(b)
		if err != nil || got != id {
			t.Errorf("DecodeTombstone(EncodeTombstone(%v)) = %v, %v", id, got, err)
		}
	}
	good := wheel.EncodeTombstone(codecID(5, 6))
	for _, b := range [][]byte{nil, good[:1], good[:len(good)-1], append(append([]byte(nil), good...), 0), append([]byte{2}, good[1:]...)} {
		if id, err := wheel.DecodeTombstone(b); !errors.Is(err, command.ErrCorruptCommand) {
			t.Errorf("DecodeTombstone(%x) = %v, %v; want ErrCorruptCommand", b, id, err)
		}
	}
}

func FuzzDecodeCommands(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0})
	f.Add(codecSampleEntry())
	for _, c := range codecCommandTypes {
		n := 0
		f.Add(command.EncodeCommands([]command.Command{codecFilled(c, &n)}))
		f.Add(command.EncodeCommands([]command.Command{c}))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cmds, err := command.DecodeCommands(b)
		if err != nil {
			if !errors.Is(err, command.ErrCorruptCommand) {
				t.Fatalf("error does not wrap ErrCorruptCommand: %v", err)
			}
			if cmds != nil {
				t.Fatal("commands returned with an error")
			}
			return
		}
		enc := command.EncodeCommands(cmds)
		again, err := command.DecodeCommands(enc)
		if err != nil {
			t.Fatalf("re-encoded commands do not decode: %v\ninput %x\nre-encoded %x", err, b, enc)
		}
		if !reflect.DeepEqual(again, cmds) {
			t.Fatalf("decode→encode→decode changed the commands:\nfirst  %#v\nsecond %#v", cmds, again)
		}
		if enc2 := command.EncodeCommands(again); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not a fixed point:\n%x\n%x", enc, enc2)
		}
	})
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte{})
	f.Add(wheel.EncodeMessage(nil, &model.Message{}))
	n := 0
	var full model.Message
	codecFill(reflect.ValueOf(&full).Elem(), &n)
	f.Add(wheel.EncodeMessage(nil, &full))
	f.Add(wheel.EncodeMessage(nil, &model.Message{ID: codecID(1, 2), Topic: "t", Headers: map[string]string{"a": "1", "b": "2"}, Body: []byte("x")}))
	f.Add(wheel.EncodeTombstone(codecID(3, 4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := wheel.DecodeMessage(b)
		if err != nil {
			if !errors.Is(err, command.ErrCorruptCommand) {
				t.Fatalf("error does not wrap ErrCorruptCommand: %v", err)
			}
			return
		}
		enc := wheel.EncodeMessage(nil, &m)
		again, err := wheel.DecodeMessage(enc)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v\ninput %x\nre-encoded %x", err, b, enc)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("decode→encode→decode changed the message:\nfirst  %#v\nsecond %#v", m, again)
		}
		if enc2 := wheel.EncodeMessage(nil, &again); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not a fixed point:\n%x\n%x", enc, enc2)
		}
	})
}
