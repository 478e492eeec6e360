package replication

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/raftlog"
)

func configLog(index uint64, ids ...string) *raft.Log {
	var c raft.Configuration
	for _, id := range ids {
		c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	return &raft.Log{Index: index, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(c)}
}

// The log store answers proposals once they are durable only while the
// latest configuration it stored has this node as the only voter.
func TestLogStoreAnswersOnlySoloVoter(t *testing.T) {
	dir := t.TempDir()
	w, err := raftlog.Open(dir, raftlog.Options{SegmentBytes: raftlog.MinSegmentBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	commits := newCommitWaiters()
	solo := &soloVoter{self: "n1"}
	e := entries{LogStore: w, commits: commits, solo: solo}
	next := uint64(1)
	store := func(logs ...*raft.Log) {
		t.Helper()
		for _, l := range logs {
			l.Index, l.Term = next, 1
			next++
		}
		if err := e.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	ids := newProposalIDs()
	cmd := func() (*raft.Log, <-chan uint64) {
		id := ids.next()
		return &raft.Log{Type: raft.LogCommand, Data: []byte{1, 2, 3}, Extensions: id[:]}, commits.add(id)
	}
	answered := func(ch <-chan uint64, want bool, what string) {
		t.Helper()
		select {
		case i := <-ch:
			if !want {
				t.Fatalf("%s: answered at index %d", what, i)
			}
		default:
			if want {
				t.Fatalf("%s: not answered", what)
			}
		}
	}

	a, cha := cmd()
	store(a)
	answered(cha, false, "before any configuration is known")

	b, chb := cmd()
	store(configLog(0, "n1"), b)
	answered(chb, true, "after a configuration of n1 alone")
	if b.Index != 3 || commits.highest.Load() != 3 {
		t.Fatalf("entry at %d, highest answered %d; want 3 and 3", b.Index, commits.highest.Load())
	}

	c1, chc1 := cmd()
	c2, chc2 := cmd()
	store(c1, configLog(0, "n1", "n2"), c2)
	answered(chc1, true, "an entry stored ahead of a new voter in the same batch")
	answered(chc2, false, "an entry stored after a second voter joined")

	d, chd := cmd()
	store(configLog(0, "n2"), d)
	answered(chd, false, "a node that is no longer a voter")

	store(configLog(0, "n1"))
	if err := e.DeleteRange(next-1, next-1); err != nil {
		t.Fatal(err)
	}
	next--
	f, chf := cmd()
	store(f)
	answered(chf, false, "after a truncation of the tail")
	if solo.solo() {
		t.Fatal("still the only voter after the tail that said so was truncated")
	}

	// Deleting the head leaves the configuration known.
	store(configLog(0, "n1"))
	if err := e.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	g, chg := cmd()
	store(g)
	answered(chg, true, "after a truncation of the head")
}

// A committed entry is matched to its proposal by the id in its
// extensions, whatever slice holds its bytes: a copy (as a log store or
// the network may hand over) is recognised, an entry without the id is not.
func TestCommitWaitersMatchByID(t *testing.T) {
	ids, commits := newProposalIDs(), newCommitWaiters()
	id := ids.next()
	other := ids.next()
	if id == other {
		t.Fatal("two proposals got the same id")
	}
	if again := newProposalIDs().next(); again == id {
		t.Fatal("a node opened again hands out an id it handed out before")
	}
	ch := commits.add(id)
	data := []byte{1, 2, 3}
	commits.notify([]*raft.Log{
		{Index: 4, Type: raft.LogCommand, Data: data},
		{Index: 5, Type: raft.LogCommand, Data: data, Extensions: other[:]},
		{Index: 6, Type: raft.LogNoop, Extensions: id[:]},
	})
	select {
	case i := <-ch:
		t.Fatalf("answered at index %d by an entry that does not carry the proposal's id", i)
	default:
	}
	commits.notify([]*raft.Log{{Index: 7, Type: raft.LogCommand, Data: slices.Clone(data), Extensions: slices.Clone(id[:])}})
	if i := <-ch; i != 7 {
		t.Fatalf("answered at index %d, want 7", i)
	}
	if h := commits.highest.Load(); h != 7 {
		t.Fatalf("highest answered index %d, want 7", h)
	}
}
