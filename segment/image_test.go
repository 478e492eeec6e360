package segment

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
)

// TestCacheImages reads a file's records until the cache reads it whole,
// then reads them from the image, records appended since from the file,
// and nothing from an image once Truncate or Remove dropped it.
func TestCacheImages(t *testing.T) {
	c := newTestCache(t, Options{})
	recs := make([]Record, 300)
	for i := range recs {
		recs[i] = Record{Type: TypeMessage, Index: uint64(i + 1), Payload: []byte(fmt.Sprintf("message %d %s", i, bytes.Repeat([]byte{'b'}, 150)))}
	}
	offs := make([]int64, len(recs))
	off, _, err := c.Append(7, recs[:200])
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs[:200] {
		offs[i] = off
		off += int64(recs[i].Size())
	}
	want := func(i int) {
		t.Helper()
		got, err := c.ReadRecord(7, offs[i])
		if err != nil || !reflect.DeepEqual(got, recs[i]) {
			t.Fatalf("ReadRecord(7, %d) = %+v, %v; want %+v", offs[i], got, err, recs[i])
		}
		got.Payload[0] = 'X' // a record shares nothing with the image
	}
	rng := rand.New(rand.NewSource(1))
	for _, i := range rng.Perm(200) {
		want(i)
	}
	if len(c.images.imgs) != 1 || c.images.imgs[0].second != 7 {
		t.Fatalf("after 200 reads of a %d-byte file: images %v, want one of second 7", off, len(c.images.imgs))
	}
	for _, i := range rng.Perm(200) {
		want(i)
	}
	// Appended after the image: read from the file.
	more, _, err := c.Append(7, recs[200:])
	if err != nil {
		t.Fatal(err)
	}
	for i := 200; i < len(recs); i++ {
		offs[i] = more
		more += int64(recs[i].Size())
	}
	for _, i := range rng.Perm(len(recs)) {
		want(i)
	}
	if err := c.Truncate(7, offs[100]); err != nil {
		t.Fatal(err)
	}
	if len(c.images.imgs) != 0 {
		t.Fatal("Truncate kept the file's image")
	}
	for i := range 100 {
		want(i)
	}
	if _, err := c.ReadRecord(7, offs[150]); err == nil {
		t.Fatal("read a record Truncate cut")
	}
	if err := c.Remove(7); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadRecord(7, offs[0]); err == nil || len(c.images.imgs) != 0 {
		t.Fatalf("read from a removed file: %v, %d images", err, len(c.images.imgs))
	}
}

// TestCacheImagesBounded reads many files often: at most imageMax images
// are kept, and a file larger than imageMaxBytes is never read whole.
func TestCacheImagesBounded(t *testing.T) {
	c := newTestCache(t, Options{})
	rec := Record{Type: TypeMessage, Index: 1, Payload: bytes.Repeat([]byte{'p'}, 1000)}
	big := make([]Record, imageMaxBytes/rec.Size()+1)
	for i := range big {
		big[i] = rec
	}
	if _, _, err := c.Append(1, big); err != nil {
		t.Fatal(err)
	}
	for s := int64(2); s < 6; s++ {
		if _, _, err := c.Append(s, []Record{rec}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		for s := int64(1); s < 6; s++ {
			for range imageMaxBytes / imageReadCost {
				if got, err := c.ReadRecord(s, HeaderSize); err != nil || !reflect.DeepEqual(got, rec) {
					t.Fatalf("ReadRecord(%d) = %v, %v", s, got, err)
				}
			}
		}
	}
	if n := len(c.images.imgs); n > imageMax {
		t.Fatalf("%d images, want at most %d", n, imageMax)
	}
	for _, im := range c.images.imgs {
		if im.second == 1 {
			t.Fatal("the file larger than imageMaxBytes was read whole")
		}
	}
}
