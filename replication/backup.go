package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Backup writes a consistent copy of this node's state to w: a checkpoint
// of the store at its applied index, in the snapshot format (a tar of the
// index files and the slot files cut to the lengths the checkpoint covers).
// It returns the applied index the copy covers.
func (n *Node) Backup(ctx context.Context, w io.Writer) (uint64, error) {
	// What this node answered is in the backup, like in every other read.
	if err := n.caughtUp(ctx); err != nil {
		return 0, err
	}
	tmp, err := os.MkdirTemp(n.cfg.DataDir, backupTempPrefix)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, "cp")
	index, err := n.store().Checkpoint(cp)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	if err := writeCheckpointTar(w, cp); err != nil {
		return 0, err
	}
	n.log.Info("backup taken", "applied_index", index)
	return index, nil
}

// RestoreBackup seeds dataDir, which must hold no node yet, from a backup
// of one group: it checks the backup, then installs it as a Raft snapshot
// whose configuration is the single voter (nodeID, raftAddr). A node
// started on dataDir with that id restores the snapshot and continues the
// log after the backup's index, so message ids never collide with restored
// ones. Other nodes then join it to form a cluster. It returns the
// backup's index. A backup archive of many groups is refused: Restore
// reads both kinds. On error, nothing it created is left behind.
func RestoreBackup(r io.Reader, dataDir, nodeID, raftAddr string) (index uint64, err error) {
	br := bufio.NewReaderSize(r, tarBlock)
	if isGroupsArchive(br) {
		return 0, fmt.Errorf("%w: the backup is an archive of many groups; restore it with `delaywheel restore` (replication.Restore)", model.ErrInvalid)
	}
	if err := checkRestoreTarget(dataDir, nodeID, raftAddr, 1); err != nil {
		return 0, err
	}
	undo, finish, err := makeDataDir(dataDir)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	if index, err = restoreGroup(br, dataDir, nodeID, raftAddr); err != nil {
		return 0, err
	}
	return index, finish()
}

// checkRestoreTarget checks a restore's node id and raft address, and that
// dataDir holds no node: none of one group (fsm, raft), none of many (the
// groups file, the directory of any of groups groups).
func checkRestoreTarget(dataDir, nodeID, raftAddr string, groups int) error {
	if nodeID == "" || raftAddr == "" {
		return fmt.Errorf("%w: restore needs the node id and raft address the node will run with", model.ErrInvalid)
	}
	paths := []string{"fsm", "raft", groupsFile}
	if groups > 1 {
		for g := range groups {
			paths = append(paths, filepath.Base(GroupDir(dataDir, g)))
		}
	}
	for _, sub := range paths {
		_, err := os.Stat(filepath.Join(dataDir, sub))
		if err == nil {
			return fmt.Errorf("%w: %s already holds a node (%s exists); restore into an empty data dir", model.ErrInvalid, dataDir, sub)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore: %w", err)
		}
	}
	return nil
}

// restoreMarker is the file a restore keeps in the data dir while it
// runs. Invariant: a data dir holding it holds a restore that did not end
// (a crash or kill during it), which a node refuses to open: started on
// it, the node would serve part of a backup as if it were the whole.
const restoreMarker = "restore-incomplete"

// makeDataDir creates dataDir when it does not exist and marks it with
// restoreMarker, durably, until finish removes the mark; undo removes
// dataDir again if it did not exist, else the mark.
func makeDataDir(dataDir string) (undo func(), finish func() error, err error) {
	_, statErr := os.Stat(dataDir)
	if err := segment.MkdirAllSync(vfs.Default, dataDir); err != nil {
		return nil, nil, fmt.Errorf("restore: %w", err)
	}
	marker := filepath.Join(dataDir, restoreMarker)
	undo = func() { os.Remove(marker) }
	if errors.Is(statErr, fs.ErrNotExist) {
		undo = func() { os.RemoveAll(dataDir) }
	}
	f, err := os.Create(marker)
	if err == nil {
		err = errors.Join(f.Sync(), f.Close(), segment.SyncDir(vfs.Default, dataDir))
	}
	if err != nil {
		undo()
		return nil, nil, fmt.Errorf("restore: mark the data dir: %w", err)
	}
	finish = func() error {
		if err := os.Remove(marker); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if err := segment.SyncDir(vfs.Default, dataDir); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		return nil
	}
	return undo, finish, nil
}

// checkNoRestore refuses a data dir a restore left unfinished.
func checkNoRestore(dataDir string) error {
	_, err := os.Stat(filepath.Join(dataDir, restoreMarker))
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s holds a restore that did not finish (%s exists): empty the data dir and restore again", model.ErrInvalid, dataDir, restoreMarker)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("data dir: %w", err)
	}
}

// restoreGroup installs one group's backup stream r in dir, an existing
// directory that holds no node (checkRestoreTarget), as RestoreBackup
// describes. On error it removes what it created in dir.
func restoreGroup(r io.Reader, dir, nodeID, raftAddr string) (index uint64, err error) {
	tmp, err := os.MkdirTemp(dir, "restore-")
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(tmp)
	// Unpack once to validate (the store opens and verifies every segment)
	// and learn the index, keeping the raw stream to copy into the snapshot.
	raw := filepath.Join(tmp, "backup.tar")
	f, err := os.Create(raw)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return 0, fmt.Errorf("restore: read backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	check := filepath.Join(tmp, "check")
	in, err := os.Open(raw)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	err = ExtractCheckpoint(in, check)
	in.Close()
	if err != nil {
		return 0, fmt.Errorf("%w: the backup is damaged: %w", model.ErrInvalid, err)
	}
	st, err := wheel.Open(check, wheel.Options{})
	if err != nil {
		return 0, fmt.Errorf("%w: the backup does not open as a store: %w", model.ErrInvalid, err)
	}
	index = st.AppliedIndex()
	if err := st.Close(); err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	if index == 0 {
		return 0, fmt.Errorf("%w: the backup covers no log entries", model.ErrInvalid)
	}

	raftDir := filepath.Join(dir, "raft")
	if err := os.MkdirAll(raftDir, 0o755); err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(raftDir)
		}
	}()
	snaps, err := raft.NewFileSnapshotStore(raftDir, 2, io.Discard)
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(nodeID), Address: raft.ServerAddress(raftAddr)}}}
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, conf, index, trans)
	if err != nil {
		return 0, fmt.Errorf("restore: create snapshot: %w", err)
	}
	in, err = os.Open(raw)
	if err != nil {
		sink.Cancel()
		return 0, fmt.Errorf("restore: %w", err)
	}
	defer in.Close()
	if _, err := io.Copy(sink, in); err != nil {
		sink.Cancel()
		return 0, fmt.Errorf("restore: write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	return index, nil
}
