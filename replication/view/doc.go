// Package view owns the types of the cluster view: the members, their
// addresses and state, as a node reports them and GET /v1/cluster answers
// them. It imports nothing, so that the node (package replication) fills
// the same type the API (transport/api) serves, without either package
// importing the other.
package view
