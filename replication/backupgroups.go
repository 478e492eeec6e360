package replication

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// A backup of a node of many groups (--groups N, N > 1) is one tar
// archive, the groups archive:
//
//	delaywheel-backup.json  the manifest: {"format": "delaywheel-groups-backup", "version": 1, "groups": N}
//	group-0.tar             group 0's backup stream, as Node.Backup writes it
//	...
//	group-<N-1>.tar
//
// The manifest comes first, so a reader knows the group count before any
// data and tells the archive from a single group's backup (a tar whose
// entries are a store's files) by its first entry's name. A reader refuses
// a manifest of a later version than groupsBackupVersion.
//
// Each group's backup is consistent in itself, at that group's applied
// index; the groups are taken one after another, not at one common
// instant. That is still a state the cluster could have been in: each
// message lives in exactly one group (its topic's, the one its id names),
// and no command spans groups, so no message is torn between two groups'
// backups or in two of them. A schedule moved to a topic of another group
// while the backup runs may be in both groups' backups or in neither.

const (
	// groupsBackupFormat names the groups archive in its manifest.
	groupsBackupFormat = "delaywheel-groups-backup"
	// groupsBackupVersion is the manifest version this code writes and
	// the latest it reads.
	groupsBackupVersion = 1
	// groupsManifestName is the manifest's entry, the archive's first.
	groupsManifestName = "delaywheel-backup.json"
	// maxManifestBytes bounds the manifest a reader accepts.
	maxManifestBytes = 4 << 10
	// tarBlock is a tar header's size: what is peeked at to tell a groups
	// archive from a single group's backup.
	tarBlock = 512
)

// groupsManifest is the groups archive's first entry.
type groupsManifest struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Groups  int    `json:"groups"`
}

// groupEntryName is the archive entry of group g's backup.
func groupEntryName(g int) string { return "group-" + strconv.Itoa(g) + ".tar" }

// WriteGroupsBackup writes the backup of a node's groups groups to w as
// one groups archive (see above). backup(g, w) writes group g's ordinary
// backup stream (Node.Backup's, or GET /v1/backup?group=g's); the groups
// are taken in order, each spooled to a temporary file in tmpDir ("": the
// system's) first, since a tar entry's header states its size. A node of
// one group is backed up with its ordinary stream instead: RestoreBackup
// and Restore read that.
func WriteGroupsBackup(w io.Writer, groups int, tmpDir string, backup func(g int, w io.Writer) error) error {
	if groups < 1 || groups > model.MaxGroups {
		return fmt.Errorf("%w: backup of %d groups; a cluster runs 1 to %d", model.ErrInvalid, groups, model.MaxGroups)
	}
	tw := tar.NewWriter(w)
	manifest, err := json.Marshal(groupsManifest{Format: groupsBackupFormat, Version: groupsBackupVersion, Groups: groups})
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	manifest = append(manifest, '\n')
	if err := tw.WriteHeader(&tar.Header{Name: groupsManifestName, Mode: 0o644, Size: int64(len(manifest)), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := tw.Write(manifest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	for g := range groups {
		if err := addGroupBackup(tw, g, tmpDir, backup); err != nil {
			return fmt.Errorf("backup of group %d: %w", g, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// addGroupBackup takes group g's backup into a temporary file in tmpDir
// and adds it to tw as the group's entry.
func addGroupBackup(tw *tar.Writer, g int, tmpDir string, backup func(g int, w io.Writer) error) error {
	f, err := os.CreateTemp(tmpDir, "delaywheel-backup-group-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := backup(g, f); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: groupEntryName(g), Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, size)
	return err
}

// isGroupsArchive says whether the stream br reads starts with a groups
// archive's manifest; it only peeks.
func isGroupsArchive(br *bufio.Reader) bool {
	head, _ := br.Peek(tarBlock)
	h, err := tar.NewReader(bytes.NewReader(head)).Next()
	return err == nil && h.Name == groupsManifestName
}

// groupsArchive reads a groups archive: the manifest when opened, then
// each group's backup stream in order.
type groupsArchive struct {
	tr     *tar.Reader
	groups int // from the manifest
	next   int // the group next returns next
}

// errArchive wraps an error reading the archive's bytes.
func errArchive(err error) error {
	return fmt.Errorf("%w: the backup archive is cut short or damaged: %w", model.ErrInvalid, err)
}

// openGroupsArchive reads and checks the manifest of the groups archive r.
func openGroupsArchive(r io.Reader) (*groupsArchive, error) {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return nil, errArchive(err)
	}
	if h.Name != groupsManifestName {
		return nil, fmt.Errorf("%w: not a backup archive of groups: its first entry is %q, not the manifest %q", model.ErrInvalid, h.Name, groupsManifestName)
	}
	if h.Size > maxManifestBytes {
		return nil, fmt.Errorf("%w: the backup archive's manifest is %d bytes; at most %d are expected", model.ErrInvalid, h.Size, maxManifestBytes)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil, errArchive(err)
	}
	var m groupsManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: the backup archive's manifest is not valid JSON: %w", model.ErrInvalid, err)
	}
	switch {
	case m.Format != groupsBackupFormat:
		return nil, fmt.Errorf("%w: the backup archive's manifest names format %q, not %q", model.ErrInvalid, m.Format, groupsBackupFormat)
	case m.Version > groupsBackupVersion:
		return nil, fmt.Errorf("%w: the backup archive is format version %d, newer than this delaywheel reads (up to %d); restore it with a delaywheel as new as the one that wrote it",
			model.ErrInvalid, m.Version, groupsBackupVersion)
	case m.Version < 1:
		return nil, fmt.Errorf("%w: the backup archive's manifest has version %d; versions start at 1", model.ErrInvalid, m.Version)
	case m.Groups < 1 || m.Groups > model.MaxGroups:
		return nil, fmt.Errorf("%w: the backup archive's manifest says %d groups; a cluster runs 1 to %d", model.ErrInvalid, m.Groups, model.MaxGroups)
	}
	return &groupsArchive{tr: tr, groups: m.Groups}, nil
}

// nextGroup returns the next group and a reader of its backup stream (its
// read errors say the archive is cut or damaged), valid until the next
// call. After the last group it checks that the archive ends there and
// returns io.EOF.
func (a *groupsArchive) nextGroup() (int, io.Reader, error) {
	h, err := a.tr.Next()
	switch {
	case errors.Is(err, io.EOF) && a.next == a.groups:
		return 0, nil, io.EOF
	case errors.Is(err, io.EOF):
		return 0, nil, a.missing()
	case err != nil:
		return 0, nil, errArchive(err)
	case a.next == a.groups:
		return 0, nil, fmt.Errorf("%w: the backup archive holds an entry %q after its last group's (the manifest says %d groups)", model.ErrInvalid, h.Name, a.groups)
	case h.Name != groupEntryName(a.next):
		if g, ok := strings.CutPrefix(h.Name, "group-"); ok {
			if n, err := strconv.Atoi(strings.TrimSuffix(g, ".tar")); err == nil && n > a.next {
				return 0, nil, a.missing()
			}
		}
		return 0, nil, fmt.Errorf("%w: the backup archive holds %q where group %d's backup %q belongs", model.ErrInvalid, h.Name, a.next, groupEntryName(a.next))
	case h.Typeflag != tar.TypeReg:
		return 0, nil, fmt.Errorf("%w: the backup archive's entry %q is not a plain file", model.ErrInvalid, h.Name)
	}
	g := a.next
	a.next++
	return g, archiveReader{a.tr}, nil
}

// missing is the error of an archive that lacks group a.next.
func (a *groupsArchive) missing() error {
	return fmt.Errorf("%w: group %d is missing from the backup archive (it holds only the first %d of the manifest's %d groups)",
		model.ErrInvalid, a.next, a.next, a.groups)
}

// archiveReader reads an entry of the archive; an error other than the
// entry's end says the archive is cut or damaged.
type archiveReader struct{ r io.Reader }

func (a archiveReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = errArchive(err)
	}
	return n, err
}

// Restored says what Restore seeded.
type Restored struct {
	// Groups is the number of groups: start the node with --groups Groups.
	Groups int
	// Indexes is each group's backup's log index, by group.
	Indexes []uint64
}

// Restore seeds dataDir, which must hold no node yet, from a backup of
// either kind. A single group's backup is restored as RestoreBackup does.
// A groups archive (WriteGroupsBackup) seeds every group in the layout
// OpenGroups expects: group g in GroupDir(dataDir, g), each as
// RestoreBackup seeds one group, with the same single voter (nodeID,
// raftAddr) — every group of a node listens on its one Raft address — and
// the groups file, so that the node must be started with the archive's
// group count. On error, nothing it created is left behind.
func Restore(r io.Reader, dataDir, nodeID, raftAddr string) (res Restored, err error) {
	br := bufio.NewReaderSize(r, tarBlock)
	if !isGroupsArchive(br) {
		index, err := RestoreBackup(br, dataDir, nodeID, raftAddr)
		if err != nil {
			return Restored{}, err
		}
		return Restored{Groups: 1, Indexes: []uint64{index}}, nil
	}
	if err := checkRestoreTarget(dataDir, nodeID, raftAddr, 1); err != nil {
		return Restored{}, err
	}
	a, err := openGroupsArchive(br)
	if err != nil {
		return Restored{}, fmt.Errorf("restore: %w", err)
	}
	if err := checkRestoreTarget(dataDir, nodeID, raftAddr, a.groups); err != nil {
		return Restored{}, err
	}
	undo, finish, err := makeDataDir(dataDir)
	if err != nil {
		return Restored{}, err
	}
	var created []string
	defer func() {
		if err != nil {
			for _, dir := range created {
				os.RemoveAll(dir)
			}
			undo()
		}
	}()
	res.Groups = a.groups
	for {
		g, gr, err := a.nextGroup()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Restored{}, fmt.Errorf("restore: %w", err)
		}
		dir := dataDir
		if a.groups > 1 {
			dir = GroupDir(dataDir, g)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return Restored{}, fmt.Errorf("restore: %w", err)
			}
			created = append(created, dir)
		}
		index, err := restoreGroup(gr, dir, nodeID, raftAddr)
		if err != nil {
			return Restored{}, fmt.Errorf("group %d of %d: %w", g, a.groups, err)
		}
		res.Indexes = append(res.Indexes, index)
	}
	if a.groups > 1 {
		created = append(created, filepath.Join(dataDir, groupsFile))
		if err := writeGroupCount(dataDir, a.groups); err != nil {
			return Restored{}, fmt.Errorf("restore: %w", err)
		}
	}
	if err := finish(); err != nil {
		return Restored{}, err
	}
	return res, nil
}
