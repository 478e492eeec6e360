package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/delaywheel/delaywheel/wheel"
)

// raftLogMapBytes is the size of the memory map bolt reserves for the Raft
// log when it opens the file (address space, not memory: only pages read
// become resident). bolt replaces its map only when the file outgrows it,
// so a map this large never moves while the log stays below it; see
// Node.HoldLogMap, which relies on that. 0 on 32-bit platforms, where bolt
// picks its own size.
const raftLogMapBytes = (8 << 30) * (strconv.IntSize / 64)

// openRaftLog opens raft.db, the bolt file that holds Raft's stable store
// (the term and vote) and, in data dirs of earlier versions, the log's
// entries too, until migrateBoltLog moves them to the log store.
// bolt maps the file and trusts it: a file cut short of the pages its meta
// page counts makes it fault (SIGBUS) or panic while it loads the freelist,
// and the process dies with a stack trace. So the file's length is checked
// against its meta page first, and a panic or fault while opening becomes
// an error that names the file.
func openRaftLog(path string) (store *raftboltdb.BoltStore, err error) {
	if err := checkBoltLength(path); err != nil {
		return nil, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			store, err = nil, fmt.Errorf("%s is damaged (opening it failed: %v); %s", path, r, raftLogRemedy)
		}
	}()
	return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{
		InitialMmapSize: raftLogMapBytes,
		NoFreelistSync:  true,
		FreelistType:    bbolt.FreelistMapType,
	}})
}

const raftLogRemedy = "this node cannot start from it: remove the node from the cluster, empty its data dir and add it again"

// boltMeta is the part of a bolt meta page the length check needs.
type boltMeta struct {
	pageSize uint32
	pgid     uint64 // high-water mark: pages [0, pgid) are in the file
	txid     uint64
}

// Layout of bolt (go.etcd.io/bbolt 1.3 to 1.5, file format version 2) meta pages: a 16-byte page header,
// then magic, version, page size, flags (4 bytes each), the root bucket
// (16), the freelist page (8), the high-water mark (8), the txid (8) and
// an FNV-64a checksum of everything before it.
const (
	boltPageHeader = 16
	boltMetaSize   = 64
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
)

// readBoltMeta reads and validates the meta page at off.
func readBoltMeta(r io.ReaderAt, off int64) (boltMeta, bool) {
	buf := make([]byte, boltPageHeader+boltMetaSize)
	if _, err := r.ReadAt(buf, off); err != nil {
		return boltMeta{}, false
	}
	m := buf[boltPageHeader:]
	le := binary.NativeEndian
	if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != le.Uint64(m[56:]) {
		return boltMeta{}, false
	}
	return boltMeta{pageSize: le.Uint32(m[8:]), pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, true
}

// checkBoltLength fails when the file at path is shorter than the pages its
// current meta page counts. A missing or empty file, or one whose meta
// pages are both invalid, is left to bolt to create or refuse.
func checkBoltLength(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	m0, ok0 := readBoltMeta(f, 0)
	pageSize := int64(os.Getpagesize())
	if ok0 && m0.pageSize > 0 {
		pageSize = int64(m0.pageSize)
	}
	m1, ok1 := readBoltMeta(f, pageSize)
	var m boltMeta
	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return nil
	}
	if need := int64(m.pgid) * int64(m.pageSize); size < need {
		return fmt.Errorf("%s is cut short: %d bytes, but its meta page (transaction %d) counts %d pages of %d bytes (%d bytes); %s",
			path, size, m.txid, m.pgid, m.pageSize, need, raftLogRemedy)
	}
	return nil
}

// realPath returns the absolute path of a file in a directory that exists,
// with symbolic links resolved, as the kernel names the file in
// /proc/self/maps; on error, path as given.
func realPath(path string) string {
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return path
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return filepath.Join(dir, filepath.Base(path))
}

// ErrLogMapMayMove is returned by HoldLogMap when raft.db has grown to
// half its reserved map: bolt may replace the map soon, so the range
// cannot be trusted to stay put.
var ErrLogMapMayMove = errors.New("raft.db is near the size of its memory map, which bolt may replace")

// HoldLogMap runs fn with the absolute path of raft.db (symbolic
// links resolved) while the map bolt reads that file through cannot move
// or go away: the node does not close the log until fn returns, and the
// file is less than half the map's reserved size, so bolt will not replace
// it (it does only when a commit outgrows the map, and one commit cannot
// add gigabytes). Within fn, the range that /proc/self/maps lists for the
// path is the log's map and nothing else. That is what makes it safe to
// advise the kernel to drop its resident pages (MADV_DONTNEED on a shared,
// read-only file map: the pages stay in the page cache, and the next read
// maps them again).
//
// It returns wheel.ErrClosed once the node is closing, ErrLogMapMayMove
// when the file is too large, and otherwise what fn returns.
func (n *Node) HoldLogMap(fn func(path string) error) error {
	n.mapMu.RLock()
	defer n.mapMu.RUnlock()
	if n.logsClosed || n.logs == nil {
		return wheel.ErrClosed
	}
	if raftLogMapBytes == 0 {
		return ErrLogMapMayMove
	}
	fi, err := os.Stat(n.logPath)
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	if fi.Size() > raftLogMapBytes/2 {
		return fmt.Errorf("%w (%d of %d bytes)", ErrLogMapMayMove, fi.Size(), raftLogMapBytes)
	}
	return fn(n.logPath)
}
