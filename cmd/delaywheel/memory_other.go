//go:build !linux

package main

import (
	"context"
	"log/slog"
	"time"
)

// pageReleaser releases mapped file pages on Linux; elsewhere there is none.
type pageReleaser struct{}

// newPageReleaser returns nil: releasing raft.db's mapped pages reads
// Linux's /proc/self/smaps.
func newPageReleaser(logMap, int64, *slog.Logger) *pageReleaser { return nil }

func (*pageReleaser) run(context.Context, time.Duration) {}
