package wheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/segment"
)

// ErrInconsistent means the files on disk do not cover the applied index the
// index claims (a segment is shorter than recorded, or missing). The node
// must not serve from this state: it restores from a snapshot instead.
var ErrInconsistent = errors.New("on-disk state does not cover the applied index")

// ErrClosed is returned by a store used after Close or after a fatal error.
var ErrClosed = errors.New("store closed")

// Options configure a Store.
type Options struct {
	// FS is the file system; the OS when nil. Tests use vfs.NewStrictMem to
	// drop unsynced writes.
	FS     vfs.FS
	Logger *slog.Logger
	// MaxOpenSegments bounds open segment handles (segment.DefaultMaxOpen).
	MaxOpenSegments int
	// SyncEveryBatch makes every Apply durable before it returns: segments are
	// fsynced, then the index. Under Raft leave it off: the log is durable
	// and Sync is called at checkpoints.
	SyncEveryBatch bool
	// CacheBytes is Pebble's block cache (default 16 MiB); MemTableBytes its
	// memtable size (default 3 MiB: a snapshot flushes it while applies
	// wait, so a small one keeps that pause short, and Pebble keeps a
	// flushed one for reuse, so an idle node holds two). Both bound memory.
	CacheBytes    int64
	MemTableBytes uint64
	// CompressIndex compresses the index's blocks with snappy. Off by
	// default: it costs CPU on every flush, compaction and read, and the
	// index values are compact binary; it pays where message bodies beyond
	// the horizon (which live in the index) compress well.
	CompressIndex bool
	// ReadOnly opens without recovery or writes, for inspecting a stopped node.
	ReadOnly bool
	// CheckMetaCache compares every meta served from the in-memory cache
	// with the index and fails the batch with ErrInconsistent if they
	// differ. For tests: it costs the index lookup the cache saves.
	CheckMetaCache bool
}

// Entry is one log entry's commands and its Raft index.
type Entry struct {
	Index uint64
	Cmds  []Command
}

// Store applies commands to the segment files and the Pebble index. Apply is
// deterministic; replaying entries at or below the applied index is a no-op,
// and Open rolls the files back to exactly the state the index covers, so a
// crash at any instant followed by a replay of the log suffix converges to
// the same state.
type Store struct {
	dir  string
	fs   vfs.FS
	log  *slog.Logger
	opts Options
	db   *pebble.DB
	segs *segment.Cache

	// life is held shared by the readers of committed state that do not
	// take mu (so that they never wait for an Apply or a flush), and
	// exclusively by Close.
	life sync.RWMutex
	pub  atomic.Pointer[published]

	mu            sync.Mutex
	broken        error
	applied       uint64
	cursor        int64 // the second being fired: slots before it have expired
	nextTopic     uint32
	promoted      int64 // see tx.promoted; 0 after an open: the first promote scans from the start
	segBufs       bufPool
	topics        map[string]uint32
	topicNames    map[uint32]string
	counts        map[uint32]counts
	stats         map[uint32]TopicStats // transitions applied since the process started
	overflow      int64
	nodes         map[string]Node
	loader        *Loader
	loadedThrough int64       // loader window: seconds [cursor, loadedThrough]
	metas         map[ID]meta // metas of messages in loaded slots or handed out from them (metacache.go)
	metasPeak     int         // most entries metas held since its map was built
	metaHits      uint64      // lookups the meta cache answered
	// expiredFiles are slot files whose Expire is applied but maybe not yet
	// durable; they are deleted after the next flush makes it so.
	expiredFiles      []int64
	expiresSinceFlush int
	flushErr          atomic.Pointer[error]
}

// published is what readers that skip mu see of the in-memory state: it is
// replaced, never changed, after every commit.
type published struct {
	applied uint64
	cursor  int64
	topics  map[string]uint32 // shared with later versions while no topic is added
}

// publishLocked makes the committed scalars visible to lock-free readers.
func (s *Store) publishLocked(topicsChanged bool) {
	p := &published{applied: s.applied, cursor: s.cursor}
	if old := s.pub.Load(); old != nil && !topicsChanged {
		p.topics = old.topics
	} else {
		p.topics = make(map[string]uint32, len(s.topics))
		for name, id := range s.topics {
			p.topics[name] = id
		}
	}
	s.pub.Store(p)
}

// flushEveryExpires bounds how many Expire commands (about one a second)
// expired slot files wait for a flush before one is forced to delete them.
const flushEveryExpires = 10

// Open opens or creates the store in dir. Files left by a crash are rolled
// back to what the index covers; if they cannot cover it, Open returns an
// error wrapping ErrInconsistent.
func Open(dir string, opts Options) (*Store, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 16 << 20
	}
	if opts.MemTableBytes == 0 {
		opts.MemTableBytes = 3 << 20
	}
	s := &Store{
		dir: dir, fs: opts.FS, log: opts.Logger, opts: opts,
		topics: map[string]uint32{}, topicNames: map[uint32]string{},
		counts: map[uint32]counts{}, stats: map[uint32]TopicStats{}, nodes: map[string]Node{}, loadedThrough: -1,
	}
	if err := segment.MkdirAllSync(opts.FS, opts.FS.PathJoin(dir, "index")); err != nil {
		return nil, fmt.Errorf("store dir: %w", err)
	}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	po := &pebble.Options{
		FS:                          opts.FS,
		Cache:                       cache,
		MemTableSize:                opts.MemTableBytes,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       32,
		MaxOpenFiles:                256,
		Levels:                      indexLevels(opts.CompressIndex),
		Logger:                      pebbleLogger{opts.Logger},
		ReadOnly:                    opts.ReadOnly,
	}
	segs, err := segment.NewCache(opts.FS.PathJoin(dir, "segments"), segment.Options{MaxOpen: opts.MaxOpenSegments, FS: opts.FS})
	if err != nil {
		return nil, err
	}
	s.segs = segs
	if !opts.SyncEveryBatch {
		// The index may become durable only through a memtable flush, and
		// every flush first fsyncs the slot files: whatever index state a
		// crash leaves, the slot bytes it records are on disk. (With the WAL
		// on, Pebble would sync it by itself when it rotates the memtable,
		// ahead of the slot files.)
		po.DisableWAL = true
		po.EventListener = &pebble.EventListener{FlushBegin: func(pebble.FlushInfo) {
			if err := segs.Sync(); err != nil {
				s.flushErr.Store(&err)
				s.log.Error("syncing slot files before an index flush failed", "err", err)
			}
		}}
	}
	if po.EventListener == nil {
		po.EventListener = &pebble.EventListener{}
	}
	LogWriteStalls(po.EventListener, opts.Logger.With("db", "index"))
	db, err := pebble.Open(opts.FS.PathJoin(dir, "index"), po)
	if err != nil {
		segs.Close()
		return nil, fmt.Errorf("open index: %w", err)
	}
	s.db = db
	if err := s.upgradeIndex(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.load(); err != nil {
		s.Close()
		return nil, err
	}
	s.publishLocked(true)
	if !opts.ReadOnly {
		if err := s.recoverSegments(); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// LogWriteStalls makes el log each of Pebble's write stalls: a warning
// with the reason when writes stop, and its length when they resume. Every
// write to the database waits out a stall, so on the node every proposal
// does.
func LogWriteStalls(el *pebble.EventListener, log *slog.Logger) {
	var began atomic.Int64
	el.WriteStallBegin = func(info pebble.WriteStallBeginInfo) {
		began.Store(time.Now().UnixNano())
		log.Warn("pebble stopped writes", "reason", info.Reason)
	}
	el.WriteStallEnd = func() {
		log.Warn("pebble resumed writes", "stalled", time.Duration(time.Now().UnixNano()-began.Load()).Round(time.Millisecond))
	}
}

// NewPebbleLogger returns a Pebble logger that writes to l: Pebble's
// informational lines at debug level, its errors as errors.
func NewPebbleLogger(l *slog.Logger) pebble.Logger { return pebbleLogger{l} }

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("index get: %w", err)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
}

// upgradeIndex brings an index of an earlier format to indexFormat: it
// moves counts and segment lengths from the key prefixes of format 1 to the
// current ones (see pCounts) and records the format, in one batch made
// durable by a flush (the index may run without a WAL). A crash before the
// flush leaves the old keys, and the next open moves them again. A
// read-only open cannot move them, and refuses; it also refuses, as any
// open does, an index of a later format than this code knows.
func (s *Store) upgradeIndex() error {
	v, err := s.get(keyFormat)
	if err != nil {
		return err
	}
	format := uint64(1)
	if v != nil {
		format = u64(v)
	}
	if format > indexFormat {
		return fmt.Errorf("the index is in format %d, which a later version wrote; this version reads formats up to %d: run that later version", format, indexFormat)
	}
	if format == indexFormat {
		return nil // recorded in the batch that moved the keys: none are left to move
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, mv := range [...]struct{ from, to byte }{{pOldCounts, pCounts}, {pOldSegLen, pSegLen}} {
		if err := s.scan([]byte{mv.from}, func(k, v []byte) error {
			if err := b.Set(append([]byte{mv.to}, k[1:]...), v, nil); err != nil {
				return err
			}
			return b.Delete(k, nil)
		}); err != nil {
			return fmt.Errorf("move index keys: %w", err)
		}
	}
	moved := b.Count() / 2
	if s.opts.ReadOnly {
		if moved > 0 {
			return errors.New("the index holds counts and slot lengths under the key prefixes of an earlier version: " +
				"start the node once (a read-write open moves them) before opening it read-only")
		}
		return nil
	}
	if err := b.Set(keyFormat, putU64(indexFormat), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("upgrade the index: %w", err)
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("upgrade the index: %w", err)
	}
	if moved > 0 {
		s.log.Info("moved counts and slot lengths to the current index key layout", "keys", moved, "format", indexFormat)
	}
	return nil
}

// load reads the scalars, topics, counts and nodes into memory.
func (s *Store) load() error {
	for _, sc := range []struct {
		key []byte
		dst func(uint64)
	}{
		{keyApplied, func(v uint64) { s.applied = v }},
		{keyCursor, func(v uint64) { s.cursor = int64(v) }},
		{keyNextTopic, func(v uint64) { s.nextTopic = uint32(v) }},
		{keyOverflow, func(v uint64) { s.overflow = int64(v) }},
	} {
		v, err := s.get(sc.key)
		if err != nil {
			return err
		}
		sc.dst(u64(v))
	}
	if err := s.scan([]byte{pTopic}, func(k, v []byte) error {
		if len(v) != 4 {
			return fmt.Errorf("%w: topic id of %d bytes", ErrCorruptCommand, len(v))
		}
		tid := binary.BigEndian.Uint32(v)
		s.topics[string(k[1:])] = tid
		s.topicNames[tid] = string(k[1:])
		return nil
	}); err != nil {
		return err
	}
	if err := s.scan([]byte{pCounts}, func(k, v []byte) error {
		s.counts[binary.BigEndian.Uint32(k[1:5])] = decodeCounts(v)
		return nil
	}); err != nil {
		return err
	}
	return s.scan([]byte{pNode}, func(k, v []byte) error {
		n, err := decodeNode(v)
		if err != nil {
			return err
		}
		s.nodes[n.ID] = n
		return nil
	})
}

// scan iterates the committed keys with prefix p.
func (s *Store) scan(p []byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("index scan: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("index scan: %w", err)
	}
	return nil
}

// segLens returns the recorded length and live count of every slot file.
func (s *Store) segLens() (map[int64]segLen, error) {
	out := map[int64]segLen{}
	err := s.scan([]byte{pSegLen}, func(k, v []byte) error {
		out[int64(u64(k[1:]))] = decodeSegLen(v)
		return nil
	})
	return out, err
}

// recoverSegments makes the slot files exactly what the index covers:
// orphans (files the index never recorded) are deleted, bytes past the
// recorded length (appends of entries the index lost) are cut, and every
// kept byte is checksummed.
func (s *Store) recoverSegments() error {
	lens, err := s.segLens()
	if err != nil {
		return err
	}
	dir := s.segs.Dir()
	names, err := s.fs.List(dir)
	if err != nil {
		return fmt.Errorf("list segments: %w", err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			if err := s.fs.Remove(s.fs.PathJoin(dir, n)); err != nil {
				return fmt.Errorf("remove %s: %w", n, err)
			}
		}
	}
	files, err := s.segs.List()
	if err != nil {
		return err
	}
	onDisk := map[int64]bool{}
	for _, sec := range files {
		onDisk[sec] = true
		if _, ok := lens[sec]; !ok {
			s.log.Info("removing segment the index does not cover", "file", s.segs.Path(sec))
			if err := s.segs.Remove(sec); err != nil {
				return err
			}
		}
	}
	for sec, l := range lens {
		path := s.segs.Path(sec)
		if !onDisk[sec] {
			return fmt.Errorf("%w: segment %s is missing (index records %d bytes)", ErrInconsistent, path, l.Length)
		}
		size, err := s.segs.Size(sec)
		if err != nil {
			return err
		}
		if size < l.Length {
			return fmt.Errorf("%w: segment %s has %d bytes, index records %d", ErrInconsistent, path, size, l.Length)
		}
		if size > l.Length {
			s.log.Info("rolling back segment tail past the applied index", "file", path, "bytes", size-l.Length)
			if err := s.segs.Truncate(sec, l.Length); err != nil {
				return err
			}
		}
		if _, _, err := segment.ReadFileFS(s.fs, path); err != nil {
			return fmt.Errorf("verify segment: %w", err)
		}
	}
	return nil
}

// AppliedIndex is the index of the last applied log entry.
func (s *Store) AppliedIndex() uint64 { return s.pub.Load().applied }

// Cursor is the second being fired: every slot before it has expired.
func (s *Store) Cursor() int64 { return s.pub.Load().cursor }

// Apply applies log entries in order as one atomic batch and returns each
// command's result. Entries at or below the applied index were applied
// before a restart and are skipped (their results are nil). An error means
// storage failed; the store refuses further writes.
func (s *Store) Apply(entries []Entry) ([][]Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, s.broken
	}
	if s.opts.ReadOnly {
		return nil, fmt.Errorf("apply: store opened read-only")
	}
	t := s.newTx()
	out := make([][]Result, len(entries))
	for i, e := range entries {
		if e.Index <= s.applied || e.Index <= t.applied {
			continue
		}
		t.index, t.seq, t.applied = e.Index, 0, e.Index
		res := make([]Result, len(e.Cmds))
		for j, c := range e.Cmds {
			res[j] = t.apply(c)
			if t.err != nil {
				break
			}
		}
		out[i] = res
		if t.err != nil {
			break
		}
	}
	if t.err == nil {
		t.err = t.commit()
	}
	if t.err != nil {
		s.broken = fmt.Errorf("%w: %w", ErrClosed, t.err)
		t.b.Close()
		return nil, t.err
	}
	return out, nil
}

// Sync makes everything applied so far durable: slot files first, then the
// index (whose applied index then covers them). It returns that index.
func (s *Store) Sync() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.syncLocked(); err != nil {
		return 0, err
	}
	return s.applied, nil
}

func (s *Store) syncLocked() error {
	if s.opts.ReadOnly {
		return nil
	}
	if err := s.segs.Sync(); err != nil {
		return err
	}
	if s.opts.SyncEveryBatch {
		if err := s.db.LogData(nil, pebble.Sync); err != nil {
			return fmt.Errorf("sync index: %w", err)
		}
	} else if err := s.db.Flush(); err != nil {
		return fmt.Errorf("flush index: %w", err)
	}
	if p := s.flushErr.Load(); p != nil {
		return *p
	}
	s.expiresSinceFlush = 0
	return s.removeExpiredLocked()
}

// removeExpiredLocked deletes the slot files of expiries that are durable.
func (s *Store) removeExpiredLocked() error {
	for _, sec := range s.expiredFiles {
		if err := s.segs.Remove(sec); err != nil {
			return err
		}
	}
	s.expiredFiles = s.expiredFiles[:0]
	return nil
}

// Close syncs and closes the store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.life.Lock()
	defer s.life.Unlock()
	var errs []error
	if s.segs != nil {
		if s.broken == nil {
			errs = append(errs, s.syncLocked())
		}
		errs = append(errs, s.segs.Close())
		s.segs = nil
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
		s.db = nil
	}
	if s.broken == nil {
		s.broken = ErrClosed
	}
	return errors.Join(errs...)
}

// segLen is the recorded state of one slot file.
type segLen struct {
	Length int64 // bytes the index covers
	Live   int64 // live message and lease records
	Bytes  int64 // payload bytes of the live records
}

func (l segLen) encode() []byte {
	b := putU64(uint64(l.Length))
	b = append(b, putU64(uint64(l.Live))...)
	return append(b, putU64(uint64(l.Bytes))...)
}

func decodeSegLen(b []byte) segLen {
	if len(b) != 24 {
		return segLen{}
	}
	return segLen{Length: int64(u64(b[0:8])), Live: int64(u64(b[8:16])), Bytes: int64(u64(b[16:24]))}
}

func encodeNode(n Node) []byte {
	e := &encoder{}
	e.str(n.ID)
	e.str(n.RaftAddr)
	e.str(n.HTTPAddr)
	return e.b
}

func decodeNode(b []byte) (Node, error) {
	d := &decoder{b: b}
	n := Node{ID: d.str(), RaftAddr: d.str(), HTTPAddr: d.str()}
	return n, d.err
}

// liveEntries returns the records of a slot file that still live there:
// for each id the last record, unless it is a tombstone. Records keep their
// file order. Every removal from a slot writes a tombstone before the id can
// be written there again, so an id without a tombstone appears once and is
// live; only ids with tombstones need tracking.
func liveEntries(entries []segment.Entry) []segment.Entry {
	var tombed map[ID]int // id → position of its last record
	for _, e := range entries {
		if e.Type == segment.TypeTombstone {
			if id, ok := payloadID(e.Payload); ok {
				if tombed == nil {
					tombed = map[ID]int{}
				}
				tombed[id] = -1
			}
		}
	}
	if tombed == nil {
		return entries
	}
	for i, e := range entries {
		if id, ok := payloadID(e.Payload); ok {
			if _, t := tombed[id]; t {
				tombed[id] = i
			}
		}
	}
	out := make([]segment.Entry, 0, len(entries))
	for i, e := range entries {
		if e.Type == segment.TypeTombstone {
			continue
		}
		if id, ok := payloadID(e.Payload); ok {
			if last, t := tombed[id]; t && last != i {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// payloadID reads the id every message and tombstone payload starts with.
func payloadID(p []byte) (ID, bool) {
	if len(p) < 1+IDLen || p[0] != recordVersion {
		return ID{}, false
	}
	id, err := IDFromBytes(p[1 : 1+IDLen])
	return id, err == nil
}

func isNotExist(err error) bool { return errors.Is(err, iofs.ErrNotExist) }

// indexLevels configures Pebble's levels for the index: no block
// compression unless asked for. Index values are compact binary that snappy
// barely shrinks, and compressing every block written by a flush or
// compaction (and decompressing it on every read) was a tenth of the
// server's CPU under a sustained enqueue load.
//
// Every table carries a bloom filter (10 bits a key, about 1% false
// positives). Most reads of the index are point lookups of keys written
// at random (a message's meta, by id) and every table's key range spans
// them, so without a filter a lookup reads a block of each level-0 table
// and each level; delivering a message looks up its meta three times.
func indexLevels(compress bool) []pebble.LevelOptions {
	lv := make([]pebble.LevelOptions, 7)
	for i := range lv {
		lv[i].FilterPolicy = bloom.FilterPolicy(10)
		lv[i].FilterType = pebble.TableFilter
		lv[i].Compression = pebble.NoCompression
		if compress {
			lv[i].Compression = pebble.SnappyCompression
		}
	}
	return lv
}

// bufPool keeps a few emptied buffers of slot-file records for the next
// batches, which would otherwise grow a fresh buffer, doubling it, for
// every slot second they append to: a fifth of the bytes a node allocated
// while it took enqueues. It keeps small buffers only, and few, so that a
// burst of large batches leaves no memory behind. s.mu guards it.
type bufPool struct {
	bufs [][]byte
}

const (
	bufPoolMax    = 8
	bufPoolMaxCap = 256 << 10
)

// take returns an empty buffer, nil when none is kept.
func (p *bufPool) take() []byte {
	n := len(p.bufs)
	if n == 0 {
		return nil
	}
	b := p.bufs[n-1]
	p.bufs = p.bufs[:n-1]
	return b
}

// give keeps b for reuse if it is small and the pool has room.
func (p *bufPool) give(b []byte) {
	if cap(b) == 0 || cap(b) > bufPoolMaxCap || len(p.bufs) >= bufPoolMax {
		return
	}
	p.bufs = append(p.bufs, b[:0])
}
