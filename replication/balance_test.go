package replication

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func TestPreferredLeader(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "n3", Suffrage: raft.Voter}, {ID: "n1", Suffrage: raft.Voter},
		{ID: "n0", Suffrage: raft.Nonvoter}, {ID: "n2", Suffrage: raft.Voter},
	}}
	var got []raft.ServerID
	for g := range 5 {
		s, ok := preferredLeader(conf, g)
		if !ok {
			t.Fatal("no preferred leader")
		}
		got = append(got, s.ID)
	}
	if want := []raft.ServerID{"n1", "n2", "n3", "n1", "n2"}; !slices.Equal(got, want) {
		t.Fatalf("preferred leaders %v, want %v", got, want)
	}
	if _, ok := preferredLeader(raft.Configuration{}, 0); ok {
		t.Fatal("a preferred leader without voters")
	}
}
