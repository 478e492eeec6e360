package wheel

import (
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
)

// A checkpoint is durable once Checkpoint returns: a power loss right after
// it (Raft may have compacted its log behind the snapshot by then) leaves
// the slot files it linked and their lengths in place, and the checkpoint
// opens as a store holding what it covered.
func TestCheckpointSurvivesCrash(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("kept"), DeliverAtMs: t0 + 3000})
	applied, err := k.s.Checkpoint("/cp")
	if err != nil {
		t.Fatal(err)
	}
	k.s.CrashForTest(k.fs)
	k.s = nil
	for _, p := range []string{"/cp/segments/" + CheckpointLens, k.fs.PathJoin("/cp/segments", k.fs.PathBase(k.segPath(t0s+3)))} {
		if _, err := k.fs.Stat(p); err != nil {
			t.Fatalf("after a power loss the checkpoint lost %s: %v", p, err)
		}
	}
	s, err := Open("/cp", Options{FS: k.fs})
	if err != nil {
		t.Fatalf("open the checkpoint after a power loss: %v", err)
	}
	defer s.Close()
	if s.AppliedIndex() != applied {
		t.Fatalf("checkpoint applied %d, want %d", s.AppliedIndex(), applied)
	}
	if v, err := s.Get(enq[0].ID); err != nil || string(v.Body) != "kept" {
		t.Fatalf("message in the checkpoint: %+v %v", v, err)
	}
}
