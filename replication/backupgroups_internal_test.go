package replication

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// FuzzGroupsArchive: the archive reader takes any bytes without panicking,
// hands out the groups in order and only after the manifest, reaches the
// end only after the manifest's count of groups, and every error it
// returns is an invalid-argument one.
func FuzzGroupsArchive(f *testing.F) {
	var buf bytes.Buffer
	err := WriteGroupsBackup(&buf, 3, f.TempDir(), func(g int, w io.Writer) error {
		_, err := fmt.Fprintf(w, "the backup of group %d", g)
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	whole := buf.Bytes()
	for _, cut := range []int{len(whole), len(whole) - 1024, 1200, 700, 100, 0} {
		f.Add(whole[:cut])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		isGroupsArchive(bufio.NewReaderSize(bytes.NewReader(data), tarBlock))
		a, err := openGroupsArchive(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, model.ErrInvalid) {
				t.Fatalf("open: %v is not an invalid-argument error", err)
			}
			return
		}
		if a.groups < 1 || a.groups > model.MaxGroups {
			t.Fatalf("the manifest's %d groups were accepted", a.groups)
		}
		for want := 0; ; want++ {
			g, r, err := a.nextGroup()
			if errors.Is(err, io.EOF) {
				if want != a.groups {
					t.Fatalf("the archive ended after %d of %d groups", want, a.groups)
				}
				return
			}
			if err == nil {
				_, err = io.Copy(io.Discard, r)
			}
			if err != nil {
				if !errors.Is(err, model.ErrInvalid) {
					t.Fatalf("group %d: %v is not an invalid-argument error", want, err)
				}
				return
			}
			if g != want {
				t.Fatalf("group %d handed out as the %dth", g, want)
			}
		}
	})
}
