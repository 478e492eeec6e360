package model

// Member is a cluster member's metadata, replicated through the log.
type Member struct {
	ID       string
	RaftAddr string
	HTTPAddr string
	// GRPCAddr is the member's gRPC API address; empty: unknown (it
	// serves none, or it was recorded before members recorded one).
	GRPCAddr string
}
