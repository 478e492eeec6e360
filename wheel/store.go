package wheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ErrInconsistent means the files on disk do not cover the applied index the
// index claims (a segment is shorter than recorded, or missing). The node
// must not serve from this state: it restores from a snapshot instead.
var ErrInconsistent = errors.New("on-disk state does not cover the applied index")

// ErrClosed is returned by a store used after Close or after a fatal error.
var ErrClosed = errors.New("store closed")

// ErrFormat means the index on disk is not in the layout this version reads.
var ErrFormat = errors.New("unsupported index format")

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
	// Group is the Raft group (0 to MaxGroups-1) the store belongs to: the
	// ids of the messages it enqueues name it (ID.Group). Group 0's ids are
	// what a store without groups mints.
	Group int
}

// Entry is one log entry's commands and its Raft index.
type Entry struct {
	Index uint64
	Cmds  []command.Command
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

	mu         sync.Mutex
	broken     error
	applied    uint64
	cursor     int64 // the second being fired: slots before it have expired
	nextTopic  uint32
	promoted   int64 // see tx.promoted; 0 after an open: the first promote scans from the start
	segBufs    bufPool
	topics     map[string]uint32
	topicNames map[uint32]string
	counts     map[uint32]counts
	stats      map[uint32]TopicStats // transitions applied since the process started
	overflow   int64
	nodes      map[string]model.Member
	schedules  int64                      // recurring schedules stored
	zoneCache  zoneCache                  // zones and cron expressions of the schedules
	webhooks   map[string]command.Webhook // by topic
	// hooks is a copy of webhooks for lock-free readers (every reserve asks).
	hooks atomic.Pointer[map[string]command.Webhook]
	// readyFloors is where reads of the ready queues start.
	readyFloors readyFloors
	// metas are the metas recent batches wrote (metacache.go).
	metas *metaCache
	// placed are the placements recent batches wrote (placedcache.go).
	placed *placedCache
	// scheds are the schedules recent batches wrote (schedulecache.go).
	scheds *scheduleCache
	// dueFloor is where DueSchedules starts reading (schedule.go).
	dueFloor int64
	// observer hears what each committed batch did to the wheel (the
	// leader's loader); it never changes what Apply writes.
	observer observer
	// loadMu lets one LoadThrough run at a time. It is taken before mu,
	// never while mu is held.
	loadMu sync.Mutex
	// loadHook, set by tests only, is called by LoadThrough before it
	// reads the slot file of each second it loads, with no lock held, so
	// that a test can apply batches while a slot loads.
	loadHook func(second int64)
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
	if opts.Group < 0 || opts.Group >= model.MaxGroups {
		return nil, fmt.Errorf("%w: store group %d is out of range [0, %d)", model.ErrInvalid, opts.Group, model.MaxGroups)
	}
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
		counts: map[uint32]counts{}, stats: map[uint32]TopicStats{}, nodes: map[string]model.Member{}, webhooks: map[string]command.Webhook{},
		metas: newMetaCache(), placed: newPlacedCache(), scheds: newScheduleCache(),
	}
	if err := segment.MkdirAllSync(opts.FS, opts.FS.PathJoin(dir, "index")); err != nil {
		return nil, fmt.Errorf("store dir: %w", err)
	}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	// Most index keys live for seconds (a message's meta and key, a
	// schedule's calendar): level 0 gathers many flushes before a
	// compaction (L0CompactionThreshold; Pebble compacts it at about half
	// that many sublevels), so that more sets meet the deletes that shadow
	// them and are dropped, and the base level is rewritten less often.
	po := &pebble.Options{
		FS:                          opts.FS,
		Cache:                       cache,
		MemTableSize:                opts.MemTableBytes,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       16,
		L0StopWritesThreshold:       32,
		MaxOpenFiles:                256,
		Levels:                      indexLevels(opts.CompressIndex),
		Comparer:                    indexComparer(),
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
	if err := s.checkFormat(); err != nil {
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

// checkFormat makes sure the index is in a layout this code reads,
// indexFormat or upgradableFormat, recorded under keyFormat. An empty
// index is new, and an index in upgradableFormat is read as indexFormat: a
// read-write open records indexFormat in either, durably (the index may
// run without a WAL), before any apply; a read-only open writes nothing.
// Any other index must carry indexFormat.
func (s *Store) checkFormat() error {
	v, err := s.get(keyFormat)
	if err != nil {
		return err
	}
	if v != nil {
		switch f := u64(v); f {
		case indexFormat:
			return nil
		case upgradableFormat:
			return s.recordFormat()
		default:
			return fmt.Errorf("%w: the index is in format %d, this version reads formats %d and %d only", ErrFormat, f, upgradableFormat, indexFormat)
		}
	}
	empty := true
	if err := s.scan(nil, func(k, v []byte) error { empty = false; return errStopScan }); err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	if !empty {
		return fmt.Errorf("%w: the index records no format, this version reads formats %d and %d only", ErrFormat, upgradableFormat, indexFormat)
	}
	return s.recordFormat()
}

// recordFormat records indexFormat in the index, durably, unless the store
// is read-only.
func (s *Store) recordFormat() error {
	if s.opts.ReadOnly {
		return nil
	}
	if err := s.db.Set(keyFormat, putU64(indexFormat), pebble.NoSync); err != nil {
		return fmt.Errorf("record the index format: %w", err)
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("record the index format: %w", err)
	}
	return nil
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop scan")

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
		{keySchedules, func(v uint64) { s.schedules = int64(v) }},
	} {
		v, err := s.get(sc.key)
		if err != nil {
			return err
		}
		sc.dst(u64(v))
	}
	if err := s.scan([]byte{pTopic}, func(k, v []byte) error {
		if len(v) != 4 {
			return fmt.Errorf("%w: topic id of %d bytes", command.ErrCorruptCommand, len(v))
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
	if err := s.scan([]byte{pNode}, func(k, v []byte) error {
		n, err := decodeNode(v)
		if err != nil {
			return err
		}
		s.nodes[n.ID] = n
		return nil
	}); err != nil {
		return err
	}
	return s.loadWebhooks()
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
