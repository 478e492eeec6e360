package replication

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/segment"
)

// refMagic starts a snapshot that refers to a checkpoint directory kept on
// this node instead of holding its bytes.
const refMagic = "DWCKPT1\n"

// snapStore is Raft's file snapshot store, made cheap for a large state.
// Persisting a snapshot taken on this node moves its checkpoint (hard
// links: no bytes copied) into <raft>/checkpoints/<snapshot id> and stores
// only a reference. The tar that followers and restores read is built when
// a snapshot is opened, which happens only to send it to a follower or to
// restore it. Snapshots received from a leader are ordinary tars.
// Checkpoints are removed with the snapshots Raft reaps.
type snapStore struct {
	*raft.FileSnapshotStore
	dir string // checkpoints
	log *slog.Logger
	// opened, when set, is told the index of each snapshot opened: Raft
	// opens one to restore it, right before the FSM's Restore.
	opened func(index uint64)
	// guard, when set, is told of each sink opened and closed (stall.go).
	guard *stallGuard
	// logFirst, when set, returns the Raft log's first index: a snapshot
	// that ends before the entry preceding it is refused (see Open).
	logFirst func() (uint64, error)
}

func newSnapStore(raftDir string, retain int, log *slog.Logger, hl hclog.Logger) (*snapStore, error) {
	fs, err := raft.NewFileSnapshotStoreWithLogger(raftDir, retain, hl)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(raftDir, "checkpoints")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoints dir: %w", err)
	}
	s := &snapStore{FileSnapshotStore: fs, dir: dir, log: log}
	if stale, _ := filepath.Glob(filepath.Join(dir, "*.tar")); len(stale) > 0 {
		for _, f := range stale { // tars a crash left behind while a snapshot was being sent
			os.Remove(f)
		}
	}
	s.prune()
	return s, nil
}

// refSink is a sink of this store; Persist recognizes it.
type refSink struct {
	raft.SnapshotSink
	store  *snapStore
	closed func() // tells the guard the sink is closed; nil without one
}

// Create starts a snapshot.
func (s *snapStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	r := &refSink{SnapshotSink: sink, store: s}
	if s.guard != nil {
		r.closed = s.guard.opened()
	}
	return r, nil
}

// Close finishes the snapshot; Raft reaps old ones, and their checkpoints go too.
func (r *refSink) Close() error {
	r.done()
	err := r.SnapshotSink.Close()
	r.store.prune()
	return err
}

// Cancel drops the snapshot.
func (r *refSink) Cancel() error {
	r.done()
	return r.SnapshotSink.Cancel()
}

func (r *refSink) done() {
	if r.closed != nil {
		r.closed()
	}
}

// keep moves a checkpoint under the sink's snapshot id and writes the reference.
func (r *refSink) keep(cp string) error {
	dst := filepath.Join(r.store.dir, r.ID())
	if err := os.Rename(cp, dst); err != nil {
		return fmt.Errorf("keep checkpoint: %w", err)
	}
	if err := segment.SyncDir(vfs.Default, r.store.dir); err != nil {
		return err
	}
	_, err := io.WriteString(r, refMagic+r.ID()+"\n")
	return err
}

// prune removes checkpoints whose snapshot Raft no longer keeps.
func (s *snapStore) prune() {
	metas, err := s.FileSnapshotStore.List()
	if err != nil {
		return
	}
	keep := map[string]bool{}
	for _, m := range metas {
		keep[m.ID] = true
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !keep[e.Name()] && !strings.HasSuffix(e.Name(), ".tar") {
			if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
				s.log.Warn("removing an old checkpoint", "dir", e.Name(), "err", err)
			}
		}
	}
}

// Open returns a snapshot's tar: its bytes, or, for a reference, a tar built
// from the kept checkpoint into a temporary file (Raft needs the exact size
// up front to send it). A snapshot older than the log's head is refused.
func (s *snapStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	// Raft falls back to an older snapshot when the newest cannot be
	// opened; one that ends before the log's first entry would resume the
	// log after entries neither holds. Refused, Raft fails to start with
	// the reasons logged, rather than stopping at the gap.
	if s.logFirst != nil {
		if first, ferr := s.logFirst(); ferr == nil && first > meta.Index+1 {
			rc.Close()
			return nil, nil, fmt.Errorf("snapshot %s ends at entry %d and the Raft log starts at entry %d: restored, it would leave entries out", id, meta.Index, first)
		}
	}
	if s.opened != nil {
		s.opened(meta.Index)
	}
	br := bufio.NewReader(rc)
	head, _ := br.Peek(len(refMagic))
	if !bytes.Equal(head, []byte(refMagic)) {
		return meta, struct {
			io.Reader
			io.Closer
		}{br, rc}, nil
	}
	ref, err := io.ReadAll(br)
	rc.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read snapshot %s: %w", id, err)
	}
	name := strings.TrimSpace(strings.TrimPrefix(string(ref), refMagic))
	if name != id {
		return nil, nil, fmt.Errorf("snapshot %s refers to checkpoint %q", id, name)
	}
	f, err := os.CreateTemp(s.dir, id+"-*.tar")
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	fail := func(err error) (*raft.SnapshotMeta, io.ReadCloser, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	if err := writeCheckpointTar(f, filepath.Join(s.dir, id)); err != nil {
		return fail(err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fail(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	m := *meta
	m.Size = size
	return &m, &tempFile{f}, nil
}

// tempFile is removed when closed.
type tempFile struct{ *os.File }

func (t *tempFile) Close() error {
	err := t.File.Close()
	os.Remove(t.Name())
	return err
}
