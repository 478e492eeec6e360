package bench

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Target names accepted by Config.Targets.
const (
	TargetDelaywheel = "delaywheel"
	TargetRedis      = "redis"
	TargetBeanstalkd = "beanstalkd"
)

// errNotSpawned is returned by operations that need a process the harness
// started (restart, resident memory from /proc).
var errNotSpawned = errors.New("target was not spawned by the harness")

// msg is one message the harness enqueues. Seq names it within the run; the
// body starts with it (see encodeBody) so that every target can tell the
// harness which message it delivered.
type msg struct {
	Seq         int
	DeliverAtMs int64
	Body        string
}

// batch is what a consumer got in one call: the sequence numbers of the
// messages (-1 for a body the harness did not write) and when the answer
// arrived.
type batch struct {
	At   time.Time
	Seqs []int
}

// target is one system under test.
type target interface {
	// Name is the target's name in the report.
	Name() string
	// Enqueue schedules the batch and returns once the target acknowledged
	// it (durably, for every target here).
	Enqueue(ctx context.Context, msgs []msg) error
	// NewConsumer opens a consumer. Each consumer is used by one goroutine.
	NewConsumer(ctx context.Context) (consumer, error)
	// Pending is how many messages the target holds that are not consumed.
	Pending(ctx context.Context) (int64, error)
	// Resources reports the server's resident memory and disk use.
	Resources(ctx context.Context) (resources, error)
	// Restart stops the server cleanly, starts it again and waits until it is
	// ready; errNotSpawned when the harness does not own the process.
	Restart(ctx context.Context) (restartTimes, error)
	// EnqueueRateHint is a rough enqueue rate in messages/s, used to decide
	// how far ahead of its due time a fire run starts enqueueing.
	EnqueueRateHint() float64
	// Close releases connections and stops what the target spawned.
	Close() error
}

// consumer takes due messages from a target.
type consumer interface {
	// Next waits (up to the configured long-poll or poll period) for due
	// messages, acknowledges them (or queues their acknowledgement, which
	// Close completes) and returns them. The batch may be non-empty when err
	// is not nil: the messages were received but an acknowledgement failed.
	Next(ctx context.Context) (batch, error)
	Close() error
}

// resources is a server's footprint; a negative value is unknown.
type resources struct {
	RSSBytes     int64 // resident memory (VmRSS)
	RSSAnonBytes int64 // of which anonymous: heap, stacks, allocator arenas
	RSSFileBytes int64 // of which mapped file pages: the executable, mapped data files
	DiskBytes    int64
}

// memUsage is a process's resident memory; a negative value is unknown.
type memUsage struct {
	RSS  int64 // VmRSS: everything resident
	Anon int64 // RssAnon
	File int64 // RssFile
}

// unknownMem is a memUsage with nothing known.
func unknownMem() memUsage { return memUsage{RSS: -1, Anon: -1, File: -1} }

// restartTimes measures a restart.
type restartTimes struct {
	Stop  time.Duration // from the stop signal until every process exited
	Ready time.Duration // from starting the processes until every one is ready
}

// encodeBody is the body of message seq: the decimal sequence number, a '|'
// and padding up to size bytes (never shorter than the number and the bar).
func encodeBody(seq, size int, pad string) string {
	s := strconv.Itoa(seq)
	n := size - len(s) - 1
	if n <= 0 {
		return s + "|"
	}
	if n > len(pad) {
		return s + "|" + pad + strings.Repeat("x", n-len(pad))
	}
	return s + "|" + pad[:n]
}

// decodeSeq returns the sequence number a body starts with, -1 when there is
// none.
func decodeSeq(body string) int {
	i := strings.IndexByte(body, '|')
	if i <= 0 {
		return -1
	}
	n, err := strconv.Atoi(body[:i])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// padding returns the padding string for bodies of the given size.
func padding(size int) string { return strings.Repeat("x", max(size, 0)) }
