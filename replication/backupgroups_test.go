package replication_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// groupsBackup takes the groups archive of gs.
func groupsBackup(t *testing.T, gs *Groups) []byte {
	t.Helper()
	var buf bytes.Buffer
	err := WriteGroupsBackup(&buf, gs.Count(), t.TempDir(), func(g int, w io.Writer) error {
		_, err := gs.Node(g).Backup(context.Background(), w)
		return err
	})
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	return buf.Bytes()
}

// TestGroupsBackupRestore: the archive of a node of three groups, restored
// into a new data dir, starts as a node of three groups that holds every
// group's messages, under their ids, and goes on with ids of its own.
func TestGroupsBackupRestore(t *testing.T) {
	const groups = 3
	c := repltest.NewGroupsCluster(t, 1, groups, nil)
	gs := c.Nodes[0].Groups
	ctx := context.Background()
	want := map[model.ID]wheel.View{}
	for g, topic := range topicsOfGroups(groups) {
		keyed := msg(topic, "keyed", time.Hour)
		keyed.Key = "k"
		for _, r := range enqueue(t, gs.Node(g), msg(topic, "soon", time.Minute), keyed, msg(topic, "far", 48*time.Hour)) {
			v, err := gs.Node(g).Get(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			want[r.ID] = v
		}
	}
	data := groupsBackup(t, gs)
	if !IsGroupsArchive(bufio.NewReader(bytes.NewReader(data))) {
		t.Fatal("the backup of three groups is not a groups archive")
	}

	dir := filepath.Join(t.TempDir(), "restored")
	addrs := nettest.FreeAddrs(t, 2)
	cfg := Config{ID: "r1", DataDir: dir, RaftAddr: addrs[0], HTTPAddr: addrs[1], RedeliveryBackoff: -1}
	res, err := Restore(bytes.NewReader(data), dir, cfg.ID, cfg.RaftAddr)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Groups != groups || len(res.Indexes) != groups {
		t.Fatalf("restored %+v, want %d groups", res, groups)
	}
	for g := range groups {
		if _, err := os.Stat(filepath.Join(GroupDir(dir, g), "raft")); err != nil {
			t.Fatalf("group %d's snapshot: %v", g, err)
		}
	}
	if n, err := StoredGroupCount(dir); err != nil || n != groups {
		t.Fatalf("the restored dir's group count: %d, %v", n, err)
	}
	if _, err := Restore(bytes.NewReader(data), dir, cfg.ID, cfg.RaftAddr); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "already holds a node") {
		t.Fatalf("a second restore into the dir: %v", err)
	}

	rc := repltest.StartGroupsCluster(t, groups, cfg)
	rgs := rc.Nodes[0].Groups
	for id, v := range want {
		n, err := rgs.ForID(id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := n.Get(ctx, id)
		if err != nil {
			t.Fatalf("restored %s: %v", id, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("restored %s:\n got %+v\nwant %+v", id, got, v)
		}
	}
	for g, topic := range topicsOfGroups(groups) {
		r := enqueue(t, rgs.Node(g), msg(topic, "new", 0))[0]
		if _, dup := want[r.ID]; dup || r.ID.Group() != g {
			t.Fatalf("new message of group %d: id %s collides with a restored one or names another group", g, r.ID)
		}
	}
}

// entryOffsets returns where each entry of the tar data starts (its header).
func entryOffsets(t *testing.T, data []byte) []int {
	t.Helper()
	var offs []int
	for off := 0; off+TarBlock <= len(data); {
		h, err := tar.NewReader(bytes.NewReader(data[off:])).Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("entry at %d: %v", off, err)
		}
		offs = append(offs, off)
		off += TarBlock + int((h.Size+TarBlock-1)/TarBlock*TarBlock)
	}
	return offs
}

// rewriteArchive rebuilds the tar data with edit applied to each entry:
// nil drops the entry, else its new body.
func rewriteArchive(t *testing.T, data []byte, edit func(name string, body []byte) []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if body = edit(h.Name, body); body == nil {
			continue
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A restore of a cut, damaged or incomplete archive, of a newer format, or
// into a dir that holds a node fails naming the problem and leaves the
// data dir as it found it.
func TestGroupsRestoreErrors(t *testing.T) {
	const groups = 3
	c := repltest.NewGroupsCluster(t, 1, groups, nil)
	gs := c.Nodes[0].Groups
	for g, topic := range topicsOfGroups(groups) {
		enqueue(t, gs.Node(g), msg(topic, "x", time.Hour))
	}
	data := groupsBackup(t, gs)
	offs := entryOffsets(t, data) // the manifest, then groups 0, 1 and 2
	if len(offs) != groups+1 {
		t.Fatalf("the archive has %d entries, want %d", len(offs), groups+1)
	}
	replace := func(name string, with []byte) []byte {
		return rewriteArchive(t, data, func(n string, body []byte) []byte {
			if n == name {
				return with
			}
			return body
		})
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"cut in the manifest", data[:offs[0]+TarBlock+10], "cut short or damaged"},
		{"cut in group 2", data[:offs[3]+TarBlock+1000], "group 2 of 3: "},
		{"cut before group 2", data[:offs[3]], "group 2 is missing"},
		{"group 1 dropped", replace(GroupEntryName(1), nil), "group 1 is missing"},
		{"group 1 garbled", replace(GroupEntryName(1), bytes.Repeat([]byte{0xa5}, 2048)), "group 1 of 3: "},
		{"newer format", replace(GroupsManifestName, []byte(`{"format":"delaywheel-groups-backup","version":2,"groups":3}`)), "format version 2, newer than"},
		{"bad manifest", replace(GroupsManifestName, []byte(`{"format":`)), "manifest is not valid JSON"},
		{"entry after the last group", rewriteArchive(t, data, func(n string, body []byte) []byte {
			if n == GroupsManifestName {
				return []byte(`{"format":"delaywheel-groups-backup","version":1,"groups":2}`)
			}
			return body
		}), `entry "group-2.tar" after its last group's`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			for _, dir := range []string{filepath.Join(parent, "new"), parent} {
				_, err := Restore(bytes.NewReader(tc.data), dir, "r1", "127.0.0.1:1")
				if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("restore into %s: %v; want an invalid-argument error saying %q", dir, err, tc.want)
				}
				t.Logf("restore into %s: %v", dir, err)
			}
			left, err := os.ReadDir(parent)
			if err != nil || len(left) != 0 {
				t.Fatalf("the failed restores left %v (%v)", left, err)
			}
		})
	}

	// A data dir that holds a node, of one group or of many, is refused.
	one := repltest.NewCluster(t, 1, nil).Nodes[0].Cfg.DataDir
	for _, dir := range []string{one, gs.Node(0).Cfg().DataDir, filepath.Dir(gs.Node(0).Cfg().DataDir)} {
		if _, err := Restore(bytes.NewReader(data), dir, "r1", "127.0.0.1:1"); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "already holds a node") {
			t.Errorf("restore into %s: %v", dir, err)
		}
	}
	// RestoreBackup reads one group's backup, and says so of an archive.
	if _, err := RestoreBackup(bytes.NewReader(data), t.TempDir(), "r1", "127.0.0.1:1"); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "archive of many groups") {
		t.Errorf("RestoreBackup of an archive: %v", err)
	}
}
