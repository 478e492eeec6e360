package beanstalkd

import (
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The bits of a job id. Invariant: a job id is a pure packing of its
// message's id, index<<18 | group<<10 | position, so every node maps a
// message to the same job id before and after restarts and failovers, and
// the job id maps back without a lookup. 46 bits of Raft index outlast a
// cluster that commits 100,000 entries a second for twenty years; 8 bits
// hold every group (model.MaxGroups); 10 bits hold the position of a
// message in its log entry, and a run of pipelined beanstalkd puts is an
// entry of at most 1,024 messages (put.go). Only an HTTP or gRPC batch of
// over 1,024 messages makes ids that do not pack: such messages are
// answered the closest way (see Server) and logged.
const (
	positionBits = 10
	groupBits    = 8
	indexBits    = 64 - groupBits - positionBits
)

// JobID packs a message id into a job id; ok is false when the id's index
// or position is too large for its bits.
func JobID(id model.ID) (job uint64, ok bool) {
	group := uint64(id.Seq >> 24)
	pos := uint64(id.Seq & (1<<24 - 1))
	if id.Index >= 1<<indexBits || pos >= 1<<positionBits || id.IsZero() {
		return 0, false
	}
	return id.Index<<(groupBits+positionBits) | group<<positionBits | pos, true
}

// MessageID unpacks a job id into the message id it was packed from.
func MessageID(job uint64) model.ID {
	index := job >> (groupBits + positionBits)
	group := uint32(job>>positionBits) & (1<<groupBits - 1)
	pos := uint32(job) & (1<<positionBits - 1)
	return model.ID{Index: index, Seq: group<<24 | pos}
}
