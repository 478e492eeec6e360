package view

// Node is a cluster member's addresses: the body of POST /v1/cluster/nodes.
type Node struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// GRPCAddr is the member's gRPC address; empty (left out): it serves
	// none, or has not recorded it.
	GRPCAddr string `json:"grpc_addr,omitempty"`
}

// NodeStatus is a member as GET /v1/cluster reports it. Unknown values
// are null (Reachable, LastContactMs, Lag) or 0 (the indexes).
type NodeStatus struct {
	Node
	Suffrage string `json:"suffrage"`
	// State is "leader", "follower" or "candidate" as the member itself
	// says, or "unknown" when it could not be asked.
	State string `json:"state"`
	// Reachable says whether the leader's heartbeats reach the member;
	// in the view of a node that knows no leader it can ask, whether the
	// member answers that node. A node always reaches itself.
	Reachable *bool `json:"reachable"`
	// LastContactMs is how long ago the member last heard from the leader
	// (for an unreachable one: the leader last heard from it).
	LastContactMs *int64 `json:"last_contact_ms"`
	AppliedIndex  uint64 `json:"applied_index"`
	CommitIndex   uint64 `json:"commit_index"`
	// Lag is the leader's commit index less the member's applied index.
	Lag *uint64 `json:"lag"`
}

// Cluster answers GET /v1/cluster.
type Cluster struct {
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	// Self is the node that answered; ViewOf the node whose view of the
	// members this is: the leader's, unless no leader could be asked.
	Self   string       `json:"self"`
	ViewOf string       `json:"view_of"`
	Nodes  []NodeStatus `json:"nodes"`
	// Groups are the cluster's Raft groups (--groups), in order; group
	// 0's leader and term are Leader and Term.
	Groups []Group `json:"groups"`
	// GRPCAddr is the gRPC address of the node that answered (Self), when
	// it serves gRPC: followers forward gRPC calls to the leader's.
	GRPCAddr string `json:"grpc_addr,omitempty"`
}

// Group is one Raft group as GET /v1/cluster reports it. Unknown indexes
// are 0 and an unknown lag is null, as for NodeStatus.
type Group struct {
	Group  int    `json:"group"`
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	// AppliedIndex and CommitIndex are the group leader's.
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	// Lag is the leader's commit index less the applied index of the node
	// that answered (Cluster.Self).
	Lag *uint64 `json:"lag"`
}
