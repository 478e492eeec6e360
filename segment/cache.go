package segment

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/vfs"
	lru "github.com/hashicorp/golang-lru/v2/simplelru"
)

// SyncPolicy says when appended bytes are made durable.
type SyncPolicy int

const (
	// SyncManual leaves fsync to the caller's [Cache.Sync]. The wheel uses it
	// under Raft, whose log is the durable record until the next checkpoint.
	SyncManual SyncPolicy = iota
	// SyncEveryBatch fsyncs the file after every Append.
	SyncEveryBatch
)

// DefaultMaxOpen is the default bound on open append handles.
const DefaultMaxOpen = 64

// Options configure a Cache.
type Options struct {
	MaxOpen int        // open handles kept; DefaultMaxOpen when 0
	Sync    SyncPolicy // when to fsync appends
	// FS is the file system; vfs.Default (the OS) when nil. Tests pass a
	// strict in-memory file system to simulate crashes.
	FS vfs.FS
	// WritebackBytes starts the write-back of the files appended to each
	// time this many bytes have been appended since the last start
	// (DefaultWritebackBytes when 0, never when negative). See writeback.
	WritebackBytes int64
}

// DefaultWritebackBytes is the default Options.WritebackBytes.
const DefaultWritebackBytes = 1 << 20

// Writeback. Without SyncEveryBatch, appends stay dirty in the page cache
// until Sync, which runs before each flush of the index's memtable, and the
// kernel starts writing dirty pages on its own only past a share of the
// machine's memory. A Sync would then write many seconds of appends at once,
// and the Raft log's fsync on the same disk would queue behind it, holding
// up every write the cluster answers. So, as Pebble does for its own files
// (BytesPerSync), the cache asks the kernel to start writing the files it
// appended to, without waiting (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE on Linux; nothing elsewhere), after every
// WritebackBytes appended. Sync still makes them durable; it finds little
// left to write.

type handle struct {
	f    vfs.File
	name string
	size int64
}

// Cache appends records to segment files through a bounded LRU of open
// handles. It is safe for concurrent use.
type Cache struct {
	dir  string
	fs   vfs.FS
	opts Options

	syncMu   sync.Mutex // one Sync at a time
	mu       sync.Mutex
	open     *lru.LRU[int64, *handle]
	dirty    map[int64]bool // seconds written since the last Sync
	dirDirty bool           // files created or removed since the last Sync
	evictErr error
	// wbBytes have been appended to the files wbFiles since write-back
	// was last started; kick starts it for one file.
	wbBytes int64
	wbFiles map[int64]bool
	kick    func(vfs.File)
	images  images
}

// NewCache returns a cache appending to segment files in dir, creating dir.
func NewCache(dir string, opts Options) (*Cache, error) {
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = DefaultMaxOpen
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if err := MkdirAllSync(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("segment dir: %w", err)
	}
	if opts.WritebackBytes == 0 {
		opts.WritebackBytes = DefaultWritebackBytes
	}
	c := &Cache{dir: dir, fs: opts.FS, opts: opts, dirty: make(map[int64]bool), wbFiles: make(map[int64]bool), kick: startWriteback}
	l, err := lru.NewLRU[int64, *handle](opts.MaxOpen, func(_ int64, h *handle) {
		if err := h.f.Close(); err != nil && c.evictErr == nil {
			c.evictErr = fmt.Errorf("close segment %s: %w", h.name, err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("segment cache: %w", err)
	}
	c.open = l
	return c, nil
}

// Dir is the directory holding the segment files.
func (c *Cache) Dir() string { return c.dir }

// FS is the file system the cache writes to.
func (c *Cache) FS() vfs.FS { return c.fs }

// Path returns the path of the segment file for second.
func (c *Cache) Path(second int64) string { return c.fs.PathJoin(c.dir, FileName(second)) }

// OpenHandles is the number of files currently open.
func (c *Cache) OpenHandles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open.Len()
}

func (c *Cache) handle(second int64) (*handle, error) {
	if h, ok := c.open.Get(second); ok {
		return h, nil
	}
	path := c.Path(second)
	f, err := c.fs.OpenReadWrite(path)
	if err != nil {
		return nil, fmt.Errorf("open segment: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat segment: %w", err)
	}
	h := &handle{f: f, name: path, size: st.Size()}
	if h.size == 0 {
		if _, err := f.WriteAt(AppendHeader(nil, second), 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("write segment header %s: %w", path, err)
		}
		h.size = HeaderSize
		c.dirDirty = true
	}
	c.open.Add(second, h)
	return h, nil
}

// Append writes recs to the end of the file for second with one write,
// creating the file when needed. It returns the offset of the first record
// and the file's length afterwards.
func (c *Cache) Append(second int64, recs []Record) (off, end int64, err error) {
	n := 0
	for _, r := range recs {
		n += r.Size()
	}
	buf := make([]byte, 0, n)
	for _, r := range recs {
		buf = AppendRecord(buf, r)
	}
	return c.AppendEncoded(second, buf)
}

// AppendEncoded writes already framed records (see AppendRecord) to the end
// of the file for second with one write.
func (c *Cache) AppendEncoded(second int64, buf []byte) (off, end int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.handle(second)
	if err != nil {
		return 0, 0, err
	}
	off = h.size
	if _, err := h.f.WriteAt(buf, off); err != nil {
		// The bytes may be partly written; forget the handle so the next
		// append re-reads the size, and let recovery truncate the tail.
		c.open.Remove(second)
		return 0, 0, fmt.Errorf("append segment %s at %d: %w", h.name, off, err)
	}
	h.size += int64(len(buf))
	if c.opts.Sync == SyncEveryBatch {
		if err := h.f.Sync(); err != nil {
			return 0, 0, fmt.Errorf("sync segment %s: %w", h.name, err)
		}
		if c.dirDirty { // a new file is durable only once its directory entry is
			if err := SyncDir(c.fs, c.dir); err != nil {
				return 0, 0, err
			}
			c.dirDirty = false
		}
	} else {
		c.dirty[second] = true
		c.writeback(second, len(buf))
	}
	return off, h.size, c.takeEvictErr()
}

// writeback notes n bytes appended to the file of second and, past
// WritebackBytes, starts the write-back of the files appended to that are
// still open (a closed file's pages are written by the next Sync). c.mu is
// held.
func (c *Cache) writeback(second int64, n int) {
	if c.opts.WritebackBytes < 0 {
		return
	}
	c.wbBytes += int64(n)
	c.wbFiles[second] = true
	if c.wbBytes < c.opts.WritebackBytes {
		return
	}
	for s := range c.wbFiles {
		if h, ok := c.open.Peek(s); ok {
			c.kick(h.f)
		}
	}
	clear(c.wbFiles)
	c.wbBytes = 0
}

func (c *Cache) takeEvictErr() error {
	err := c.evictErr
	c.evictErr = nil
	return err
}

// ReadRecord reads the record at offset off of the file for second through
// the handle cache: the slots near the cursor, which leases and acks read,
// are open already, so a read costs no open(2). A missing file is an error
// wrapping fs.ErrNotExist; it is never created.
func (c *Cache) ReadRecord(second, off int64) (Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.images.record(second, off); ok {
		return r, nil
	}
	h, ok := c.open.Get(second)
	if !ok {
		path := c.Path(second)
		if _, err := c.fs.Stat(path); err != nil {
			return Record{}, fmt.Errorf("read segment record: %w", err)
		}
		var err error
		if h, err = c.handle(second); err != nil {
			return Record{}, err
		}
	}
	// Under c.mu: an eviction cannot close the handle mid-read.
	if c.images.counted(second, h.size) {
		c.images.load(second, h.f, h.size)
		if r, ok := c.images.record(second, off); ok {
			return r, nil
		}
	}
	return readRecordAt(h.f, h.name, off)
}

// Size returns the length of the file for second, or 0 when there is none.
func (c *Cache) Size(second int64) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.open.Peek(second); ok {
		return h.size, nil
	}
	st, err := c.fs.Stat(c.Path(second))
	if errors.Is(err, iofs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stat segment: %w", err)
	}
	return st.Size(), nil
}

// syncFSThreshold is how many dirty files make Sync use one syncfs(2) on
// the file system instead of an fsync per file (OS file system, Linux).
const syncFSThreshold = 16

// Sync makes every append since the previous Sync durable, including appends
// to files whose handles were evicted since, and the directory entries of
// files created or removed. Appends are not blocked while it runs; Syncs
// run one at a time, so each covers every append made before it began.
func (c *Cache) Sync() error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.mu.Lock()
	seconds := make([]int64, 0, len(c.dirty))
	for s := range c.dirty {
		seconds = append(seconds, s)
	}
	clear(c.dirty)
	dirDirty := c.dirDirty
	c.dirDirty = false
	evictErr := c.takeEvictErr()
	c.mu.Unlock()
	if evictErr != nil {
		c.redirty(seconds, dirDirty)
		return evictErr
	}
	slices.Sort(seconds)
	if err := c.syncFiles(seconds, dirDirty); err != nil {
		c.redirty(seconds, dirDirty)
		return err
	}
	return nil
}

func (c *Cache) syncFiles(seconds []int64, dirDirty bool) error {
	if c.fs == vfs.Default && len(seconds) >= syncFSThreshold {
		// Thousands of slot files (delays spread over the horizon) cost
		// thousands of fsyncs; one syncfs covers them and the directory.
		if err := syncFilesystem(c.dir); err == nil {
			return nil
		}
	}
	// The files are independent: fsync them in parallel, so a few dirty
	// files cost about one fsync of latency rather than one each.
	errs := make([]error, len(seconds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, s := range seconds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := syncFile(c.fs, c.Path(s)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				errs[i] = err
			}
		}()
	}
	// The directory's fsync runs beside the files' and keeps its own
	// error: errs belongs to the goroutines until wg.Wait returns.
	var dirErr error
	if dirDirty {
		dirErr = SyncDir(c.fs, c.dir)
	}
	wg.Wait()
	return errors.Join(append(errs, dirErr)...)
}

// redirty puts back what a failed Sync did not make durable.
func (c *Cache) redirty(seconds []int64, dirDirty bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range seconds {
		c.dirty[s] = true
	}
	c.dirDirty = c.dirDirty || dirDirty
}

func syncFile(fs vfs.FS, path string) error {
	// Open, not OpenReadWrite: a file removed meanwhile must not come back.
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// MkdirAllSync creates dir and its parents and makes their entries durable.
func MkdirAllSync(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for d := dir; ; {
		parent := fs.PathDir(d)
		if err := SyncDir(fs, parent); err != nil {
			return err
		}
		if parent == d || parent == "." || parent == "/" {
			return nil
		}
		d = parent
	}
}

// SyncDir makes the entries of dir (files created, renamed or removed in
// it) durable.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// Truncate cuts the file for second to size bytes, removing it when size is
// at most a bare header. Recovery uses it to roll a file back to the length
// the index recorded.
func (c *Cache) Truncate(second, size int64) error {
	if size <= HeaderSize {
		return c.Remove(second)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open.Remove(second)
	c.images.drop(second)
	if err := truncateFile(c.fs, c.Path(second), size); err != nil {
		return err
	}
	delete(c.dirty, second) // truncateFile syncs
	return c.takeEvictErr()
}

// Remove closes and deletes the file for second. A missing file is not an error.
func (c *Cache) Remove(second int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open.Remove(second)
	c.images.drop(second)
	delete(c.dirty, second)
	if err := c.fs.Remove(c.Path(second)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("remove segment: %w", err)
	}
	c.dirDirty = true
	return c.takeEvictErr()
}

// List returns the seconds of every segment file in the directory, sorted.
func (c *Cache) List() ([]int64, error) {
	return ListFS(c.fs, c.dir)
}

// ListFS returns the seconds of every segment file in dir on the file
// system fs, sorted.
func ListFS(fs vfs.FS, dir string) ([]int64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var out []int64
	for _, n := range names {
		s, ok := ParseFileName(n)
		if !ok {
			continue
		}
		if st, err := fs.Stat(fs.PathJoin(dir, n)); err != nil || st.IsDir() {
			continue
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

// Close closes every open handle.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open.Purge()
	c.images = images{}
	return c.takeEvictErr()
}
