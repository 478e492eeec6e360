package wheel

import (
	"bytes"
	"sync"
)

// readyFloors remembers, per topic, a key no ready message of the topic
// sorts before: where reading the ready queue starts.
//
// Reading the head of a ready queue is reading the first keys of a range
// whose head keeps being deleted, each reserve deleting what the last one
// read. Until a compaction drops them, those deletions stay in the index,
// and a read that started at the range's start would pass over every one:
// a consumer that catches up on a long queue would read more the further
// it got. Starting at the floor, a read passes over only what was deleted
// since the last read.
//
// It is memory of this process that only readers use: Apply never reads it.
// The invariant is that every ready key of the topic visible in the index
// sorts at or after the floor. An apply lowers the floor to each ready key
// it wrote, after its batch is committed, so that no reader can raise the
// floor over a key it did not see: a reader raises it to the first key its
// read met only if no apply lowered it meanwhile (gen is unchanged). A
// lowering that comes after the reader's read began but before the key is
// visible to it cannot happen, since the lowering follows the commit.
type readyFloors struct {
	mu sync.Mutex
	m  map[uint32]readyFloor
}

type readyFloor struct {
	key []byte // nil: the start of the topic's range
	gen uint64 // bumped by every lowering
}

// get returns where reading topic tid's ready queue may start, and the
// generation to pass to raise.
func (f *readyFloors) get(tid uint32) readyFloor {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[tid]
}

// raise moves topic tid's floor up to key (the first ready key a read that
// started at from met, or the range's end when it met none), unless an
// apply lowered the floor since from was read.
func (f *readyFloors) raise(tid uint32, from readyFloor, key []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.m[tid]; cur.gen == from.gen && bytes.Compare(key, cur.key) > 0 {
		if f.m == nil {
			f.m = map[uint32]readyFloor{}
		}
		f.m[tid] = readyFloor{key: key, gen: cur.gen}
	}
}

// lower moves the floors down to the ready keys a committed batch wrote
// (lowest per topic).
func (f *readyFloors) lower(keys map[uint32][]byte) {
	if len(keys) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[uint32]readyFloor{}
	}
	for tid, k := range keys {
		cur := f.m[tid] // a nil key (never raised) is below every key
		if bytes.Compare(k, cur.key) < 0 {
			cur.key = k
		}
		cur.gen++
		f.m[tid] = cur
	}
}
