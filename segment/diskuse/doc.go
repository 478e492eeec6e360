// Package diskuse measures the bytes files take under directories, each
// file once however many hard links reach it. A node's snapshots share
// their index tables with its live store through hard links, so a plain
// walk counts those tables once per snapshot; the metrics and the
// benchmark harness count them once.
package diskuse
