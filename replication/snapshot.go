package replication

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel"
)

// A snapshot is a checkpoint of the state machine's directory: the Pebble
// index checkpointed and the slot files linked, cut to the lengths the
// checkpoint covers. The local snapshot store keeps the checkpoint itself
// (snapstore.go); a snapshot sent to a follower, or read by a backup, is
// the checkpoint as a tar.

// Prefixes of the temporary directories a snapshot and a backup take their
// checkpoints in, in the data dir: removeTemporaries drops those a stop
// left behind.
const (
	snapshotTempPrefix = "snapshot-"
	backupTempPrefix   = "backup-"
)

// removeTemporaries removes the checkpoints of snapshots and backups that
// were being taken in dataDir when the node stopped: they hold links to
// slot files the store has since dropped, so their disk space would never
// be freed. The data dir's lock is held: nothing else takes any.
func removeTemporaries(dataDir string, log *slog.Logger) {
	for _, prefix := range []string{snapshotTempPrefix, backupTempPrefix} {
		left, _ := filepath.Glob(filepath.Join(dataDir, prefix+"*"))
		for _, dir := range left {
			if err := os.RemoveAll(dir); err != nil {
				log.Warn("removing a checkpoint left by an earlier run", "dir", dir, "err", err)
			}
		}
	}
}

// Snapshot checkpoints the store (sync, Pebble checkpoint, links of the slot
// files) into a temporary directory that Persist streams.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(f.dir), snapshotTempPrefix)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	cp := filepath.Join(tmp, "cp")
	start := time.Now()
	f.mu.RLock()
	index, err := f.store.Checkpoint(cp)
	f.mu.RUnlock()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	// Applies wait while the checkpoint is taken: its length is worth seeing.
	f.log.Info("snapshot taken", "applied_index", index, "took", time.Since(start).Round(time.Millisecond))
	return &fsmSnapshot{dir: tmp, cp: cp}, nil
}

type fsmSnapshot struct {
	dir, cp string
}

// Persist keeps the checkpoint (see snapStore), or streams it as a tar to
// another kind of sink: index/* files whole, and segments/* cut to the
// lengths the checkpoint covers.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if rs, ok := sink.(*refSink); ok {
		// Keep the checkpoint itself; the tar is built if it is ever opened.
		if err := rs.keep(s.cp); err != nil {
			sink.Cancel()
			return err
		}
		return sink.Close()
	}
	if err := writeCheckpointTar(sink, s.cp); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release removes the temporary checkpoint.
func (s *fsmSnapshot) Release() { os.RemoveAll(s.dir) }

// writeCheckpointTar writes the checkpoint directory cp to w as a tar.
func writeCheckpointTar(w io.Writer, cp string) error {
	lensData, err := os.ReadFile(filepath.Join(cp, "segments", wheel.CheckpointLens))
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	lens, err := wheel.ParseCheckpointLens(string(lensData))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(cp, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(cp, path)
		st, err := d.Info()
		if err != nil {
			return err
		}
		size := st.Size()
		if sec, ok := segment.ParseFileName(d.Name()); ok && strings.HasPrefix(rel, "segments"+string(filepath.Separator)) {
			n, ok := lens[sec]
			if !ok || n > size {
				return fmt.Errorf("snapshot: segment %s: %d bytes, checkpoint covers %d", rel, size, n)
			}
			size = n
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		fh, err := os.Open(path)
		if err != nil {
			return err
		}
		defer fh.Close()
		_, err = io.CopyN(tw, fh, size)
		return err
	})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return tw.Close()
}

// Restore replaces the store with a snapshot: the tar is unpacked next to
// the live directory, which is then swapped out by rename.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	tmp := f.dir + ".restore"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := extractTar(rc, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	os.Remove(filepath.Join(tmp, "segments", wheel.CheckpointLens))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.store != nil {
		if err := f.store.Close(); err != nil {
			f.log.Warn("closing store before restore", "err", err)
		}
	}
	old := f.dir + ".old"
	os.RemoveAll(old)
	if err := os.Rename(f.dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("restore: %w", err)
	}
	if err := os.Rename(tmp, f.dir); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := segment.SyncDir(vfs.Default, filepath.Dir(f.dir)); err != nil {
		return err
	}
	st, err := wheel.Open(f.dir, f.opts)
	if err != nil {
		return fmt.Errorf("restore: open restored store: %w", err)
	}
	f.store = st
	f.done.Store(max(f.restoring.Load(), st.AppliedIndex()))
	os.RemoveAll(old)
	f.log.Info("snapshot restored", "applied_index", st.AppliedIndex())
	if f.onRestore != nil {
		f.onRestore(st)
	}
	f.signalApplied()
	return nil
}

// ExtractCheckpoint unpacks a snapshot stream (as Persist writes it) into
// dir, the layout of a node's fsm directory. The backup restore uses it.
func ExtractCheckpoint(r io.Reader, dir string) error {
	if err := extractTar(r, dir); err != nil {
		return err
	}
	return os.Remove(filepath.Join(dir, "segments", wheel.CheckpointLens))
}

func extractTar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("restore: read snapshot: %w", err)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") || h.Typeflag != tar.TypeReg {
			return fmt.Errorf("restore: snapshot entry %q is not a plain relative file", h.Name)
		}
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			out.Close()
			return fmt.Errorf("restore: write %s: %w", name, err)
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return fmt.Errorf("restore: sync %s: %w", name, err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, "index"), filepath.Join(dir, "segments")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if err := segment.SyncDir(vfs.Default, d); err != nil {
			return err
		}
	}
	return nil
}
