// Package console owns the web console every node serves at /ui/: one HTML
// page, its stylesheet and its script, embedded in the binary (no build
// step, nothing loaded from elsewhere, so it works offline and from a
// FROM scratch image).
//
// The page holds no state on the server: it reads and drives the node's
// HTTP API (/v1/wheel, /v1/wheel/overflow, /v1/wheel/slots/{slot},
// /v1/topics, dead letters and redrive, /v1/messages, /v1/cluster and
// /metrics) from the browser with the same bearer token, which it asks for
// when an API call answers 401 and keeps in the tab's sessionStorage only.
// It polls the view on screen every 1.5 s.
//
// Views: Wheel (the 7200 slots as a heat map with the cursor, the overflow
// by hour, a slot's file and records), Topics (counts per state, rates and
// delivery lateness from /metrics, dead letters with redrive), Message
// (look up, cancel, reschedule; cancel by topic and key) and Cluster (the
// members, the leader, indexes and lag, the node answering).
//
// Package transport mounts [Handler] at /ui/; this package imports nothing
// of the server.
package console
