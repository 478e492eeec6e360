package wheel

import (
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestNodeRecordOldAndNew: a member's record written before records held
// a gRPC address (three strings) reads with an empty (unknown) GRPCAddr,
// and one with the address reads back whole.
func TestNodeRecordOldAndNew(t *testing.T) {
	old := &command.Encoder{}
	old.Str("n1")
	old.Str("10.0.0.1:7000")
	old.Str("10.0.0.1:8080")
	n, err := decodeNode(old.B)
	if err != nil || n != (model.Member{ID: "n1", RaftAddr: "10.0.0.1:7000", HTTPAddr: "10.0.0.1:8080"}) {
		t.Fatalf("old record: %+v, %v", n, err)
	}
	if got := encodeNode(n); string(got) != string(old.B) {
		t.Fatalf("a node without a gRPC address encodes as %x, want the old %x", got, old.B)
	}
	full := model.Member{ID: "n1", RaftAddr: "10.0.0.1:7000", HTTPAddr: "10.0.0.1:8080", GRPCAddr: "10.0.0.1:7070"}
	if n, err := decodeNode(encodeNode(full)); err != nil || n != full {
		t.Fatalf("new record: %+v, %v", n, err)
	}
}
