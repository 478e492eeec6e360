package segment

import (
	"bytes"
	"io"
	"slices"
)

// Images. The records of a slot file are read one at a time, by offset,
// as the messages they hold are handed out: as many reads as the second
// held messages, each a pread(2). Once a file has been read often enough
// that reading all of it would have cost no more, ReadRecord reads it
// whole into memory once and serves the following reads of it from there
// (rent or buy: the reads before the image cost at most what the image
// does, so a file read a few times is never read whole).
//
// Invariant: an image holds a prefix of its file as the file is. A file's
// bytes never change once written: appends go past its end, and only
// Truncate and Remove, which drop the file's image, cut or delete them.
// A record that ends past the image (appended after it was read) is read
// from the file. So an image changes where a read is served from, never
// what it returns.

const (
	// imageMaxBytes bounds one image: a larger file is read record by
	// record.
	imageMaxBytes = 4 << 20
	// imageMax bounds the images kept, the oldest dropped first: what a
	// Cache holds in images stays below imageMax × imageMaxBytes.
	imageMax = 2
	// imageReadCost is how many bytes of a file read whole cost about as
	// much as one read of a record: a file is imaged once it has been read
	// size/imageReadCost times.
	imageReadCost = 8 << 10
	// imageTrackMax bounds the files whose reads are counted; the counts
	// restart when more are read.
	imageTrackMax = 64
)

// images are the slot files read whole and the reads of the others.
// Cache.mu guards them.
type images struct {
	imgs  []image // oldest first
	reads map[int64]int64
}

type image struct {
	second int64
	buf    []byte // the file's first len(buf) bytes
}

// record returns the record at off of second's image, a copy that shares
// nothing with it, if the image holds all of it intact.
func (is *images) record(second, off int64) (Record, bool) {
	for _, im := range is.imgs {
		if im.second != second {
			continue
		}
		if off < HeaderSize || off+FrameHeaderSize > int64(len(im.buf)) {
			return Record{}, false
		}
		b := im.buf[off:]
		n := int64(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
		if n > MaxPayload || off+FrameHeaderSize+n > int64(len(im.buf)) {
			return Record{}, false
		}
		rec, _, err := DecodeRecord(b[:FrameHeaderSize+n])
		if err != nil {
			return Record{}, false // read from the file, which reports it
		}
		rec.Payload = bytes.Clone(rec.Payload)
		return rec, true
	}
	return Record{}, false
}

// counted counts a read of the file of second, size bytes long, from the
// file, and reports whether it is time to image it.
func (is *images) counted(second, size int64) bool {
	if size > imageMaxBytes {
		return false
	}
	if is.reads == nil || len(is.reads) >= imageTrackMax {
		is.reads = map[int64]int64{}
	}
	is.reads[second]++
	return is.reads[second]*imageReadCost >= size
}

// load reads the first size bytes of f, the file of second, as its image.
// A failed read keeps no image: the record is then read from the file.
func (is *images) load(second int64, f io.ReaderAt, size int64) {
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return
	}
	is.drop(second)
	if len(is.imgs) >= imageMax {
		is.imgs = slices.Delete(is.imgs, 0, 1)
	}
	is.imgs = append(is.imgs, image{second: second, buf: buf})
	delete(is.reads, second)
}

// drop forgets the image and the reads of second's file.
func (is *images) drop(second int64) {
	delete(is.reads, second)
	for i, im := range is.imgs {
		if im.second == second {
			is.imgs = slices.Delete(is.imgs, i, i+1)
			return
		}
	}
}
