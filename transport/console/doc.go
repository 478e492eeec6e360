// Package console owns the web console every node serves at /ui/: one HTML
// page, its stylesheet and its script, embedded in the binary (no build
// step, nothing loaded from elsewhere, so it works offline and from a
// FROM scratch image).
//
// The page holds no state on the server: it reads and drives the node's
// HTTP API (/v1/wheel, /v1/wheel/overflow, /v1/wheel/slots/{slot},
// /v1/topics, dead letters and redrive, a topic's webhook, its schedules
// (/v1/schedules?topic=), /v1/messages, /v1/cluster and /metrics) from
// the browser with the same bearer token, which it asks for
// when an API call answers 401 and keeps in the tab's sessionStorage only.
// It polls the view on screen every 1.5 s.
//
// Views: Wheel (the 7200 slots as a heat map with the cursor, the overflow
// by hour, a slot's file and records), Topics (counts per state, rates and
// delivery lateness from /metrics; for the one topic opened, at
// #topics/{topic}, its webhook, which it can remove, the schedules that
// enqueue to it, which it can delete, and its dead letters with redrive),
// Message (look up, cancel, reschedule; cancel by topic and key) and
// Cluster (the members, the leader, indexes and lag; per Raft group its
// leader, term, the leader's indexes and this node's lag; the node
// answering). Only the opened topic's details are read, so the page stays
// light with many topics.
//
// Package transport mounts [Handler] at /ui/; this package imports nothing
// of the server.
package console
