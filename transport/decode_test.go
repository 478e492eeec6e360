package transport

import (
	"bytes"
	"errors"
	"testing"
	"testing/iotest"
)

// TestReadAllSized: a body is read whole whatever length it announced,
// and a read error is returned.
func TestReadAllSized(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB, over maxBodyPrealloc
	for _, c := range []struct {
		name      string
		n         int
		announced int64
	}{
		{"exact", 20_000, 20_000},
		{"unknown", 20_000, -1},
		{"announced short", 20_000, 100},
		{"announced long", 20_000, 1 << 30},
		{"empty", 0, 0},
		{"over the preallocation", len(body), int64(len(body))},
	} {
		got, err := readAllSized(iotest.HalfReader(bytes.NewReader(body[:c.n])), c.announced)
		if err != nil || !bytes.Equal(got, body[:c.n]) {
			t.Errorf("%s: read %d bytes, err %v; want %d bytes", c.name, len(got), err, c.n)
		}
	}
	boom := errors.New("boom")
	if _, err := readAllSized(iotest.ErrReader(boom), 10); !errors.Is(err, boom) {
		t.Errorf("read error: got %v, want %v", err, boom)
	}
}
