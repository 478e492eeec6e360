// Package command owns the commands the replicated log carries and their
// binary encoding: what each command says (Schedule, Lease, Ack, SetNode,
// SetSchedule...), what applying one returns (Result), EncodeCommands and
// DecodeCommands, and the Encoder and Decoder primitives that the engine's
// stored records are written with too. It knows nothing of the store that
// applies the commands (package wheel) nor of Raft: replication proposes
// what it encodes, and the engine applies what it decodes. The encodings
// are part of the log and snapshot formats: a change must keep reading
// what older versions wrote.
package command
