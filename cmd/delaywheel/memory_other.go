//go:build !linux

package main

import (
	"context"
	"log/slog"
	"time"
)

// pageReleaser releases mapped file pages on Linux; elsewhere there is none.
type pageReleaser struct{}

// newPageReleaser returns nil: releasing mapped pages needs Linux's
// MADV_PAGEOUT.
func newPageReleaser(string, int64, *slog.Logger) *pageReleaser { return nil }

func (*pageReleaser) run(context.Context, time.Duration) {}

// prefetchFile does nothing outside Linux, where pages are never released.
func prefetchFile(context.Context, string) (int64, error) { return 0, nil }
