package wheel

// The randomized model test, in the spirit of Pebble's metamorphic tests: a
// generator produces random command sequences against a plain in-memory
// reference model (maps, no files, no Pebble), the same log is applied to a
// real Store on a strict in-memory file system, and after every step the
// store's visible state is compared with the model's. At random points the
// store "loses power" (CrashForTest), segment tails are damaged, the store
// is reopened and the log suffix replayed from AppliedIndex()+1 (or all of
// it, to check idempotency).
//
// A replica applies the same log one entry at a time, with no loader
// attached and no crash; at checkpoints and at the end its Dump must equal
// the store's, which has a loader attached and loading slots.
//
// Run a longer hunt with, for example:
//
//	go test ./wheel -run TestModel -model.seed 7 -model.seeds 20 -model.steps 20000

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

var (
	modelSeed  = flag.Int64("model.seed", 1, "seed of the randomized model test")
	modelSeeds = flag.Int("model.seeds", 1, "number of consecutive seeds to run, starting at -model.seed")
	modelSteps = flag.Int("model.steps", 3000, "steps (Apply calls) per seed")
	modelFull  = flag.Int("model.full", 10, "Get every message ever created every n steps (1: every step)")
	modelTrace = flag.Bool("model.trace", false, "log every applied entry")
)

func TestModel(t *testing.T) {
	for i := 0; i < *modelSeeds; i++ {
		seed := *modelSeed + int64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runModel(t, seed, *modelSteps, 0)
		})
	}
}

// TestModelGroup runs the model on the store of the last group, whose ids
// hold the group in Seq's top byte: every read, placement and replay must
// agree with the model as for group 0.
func TestModelGroup(t *testing.T) {
	runModel(t, *modelSeed, min(*modelSteps, 1500), model.MaxGroups-1)
}

// ---------------------------------------------------------------------------
// The reference model.

type mLoc uint8

const (
	mlWheel    mLoc = iota + 1 // a record in the slot file of its due second
	mlOverflow                 // beyond the horizon
	mlReady                    // on its topic's ready queue
	mlDead                     // in its topic's dead letters
)

func (l mLoc) String() string {
	return [...]string{"?", "wheel", "overflow", "ready", "dead"}[l]
}

type mMsg struct {
	model.Message       // what Get must return
	state         State //
	loc           mLoc
	lease         bool // its wheel or overflow record is a lease redelivery
	gen           int  // bumped every time a record is written into a wheel slot
}

type mTopicKey struct{ topic, key string }

// refModel is the reference: what the store must look like after a log.
type refModel struct {
	cursor  int64
	msgs    map[model.ID]*mMsg // messages that exist (not acked or cancelled)
	created []model.ID         // every id ever created, in creation (= id) order
	order   []model.ID         // a superset of the existing ids, in id order; see live
	keys    map[mTopicKey]model.ID
	topics  map[string]bool
	nodes   map[string]model.Member
	scheds  map[string]*ScheduleInfo // model_schedule_test.go
	gen     int
	group   int // the store's group: the top byte of every Seq it mints
	index   uint64
	seq     uint32
	dirty   map[model.ID]bool // ids changed since the harness last looked
}

func newRefModel(group int) *refModel {
	return &refModel{group: group, msgs: map[model.ID]*mMsg{}, keys: map[mTopicKey]model.ID{}, topics: map[string]bool{},
		nodes: map[string]model.Member{}, dirty: map[model.ID]bool{}, scheds: map[string]*ScheduleInfo{}}
}

func mClamp(ms int64) int64 {
	if ms < 0 {
		return 0
	}
	if ms > MaxDueMs {
		return MaxDueMs
	}
	return ms
}

func (md *refModel) begin(index uint64) { md.index, md.seq = index, 0 }

// live returns the existing ids in id order.
func (md *refModel) live() []model.ID {
	if len(md.order) > 2*len(md.msgs)+16 {
		kept := md.order[:0]
		for _, id := range md.order {
			if md.msgs[id] != nil {
				kept = append(kept, id)
			}
		}
		md.order = kept
	}
	return md.order
}

func (md *refModel) apply(c command.Command) command.Result {
	switch c := c.(type) {
	case command.Schedule:
		return md.schedule(c)
	case command.Cancel:
		return md.cancel(c)
	case command.Reschedule:
		return md.reschedule(c)
	case command.Lease:
		return md.lease(c)
	case command.Ack:
		return md.ack(c)
	case command.Nack:
		return md.nack(c)
	case command.Touch:
		return md.touch(c)
	case command.Bury:
		return md.bury(c)
	case command.Expire:
		md.expire(c.Before)
		return command.Result{}
	case command.Promote:
		return command.Result{Value: md.promote(c.Before)}
	case command.Redrive:
		return md.redrive(c)
	case command.SetNode:
		md.nodes[c.Node.ID] = c.Node
		return command.Result{}
	case command.RemoveNode:
		delete(md.nodes, c.ID)
		return command.Result{}
	case command.SetSchedule:
		return md.setSchedule(c)
	case command.DeleteSchedule:
		return md.deleteSchedule(c)
	case command.AdvanceSchedules:
		return md.advanceSchedules(c)
	}
	panic(fmt.Sprintf("model: unknown command %T", c))
}

func clearLeaseM(m *mMsg) {
	m.Receipt, m.LeaseExpiresMs, m.LeaseMs = 0, 0, 0
	m.lease = false
}

// place files a message by its due second: before the cursor it is due
// already (ready; an expired lease out of attempts is dead), inside the
// horizon it goes to its slot, beyond it to overflow.
func (md *refModel) place(m *mMsg, lease bool) {
	md.dirty[m.ID] = true
	sec := m.DeliverAtMs / TickMs
	switch {
	case sec < md.cursor:
		if lease && m.Attempts >= m.MaxAttempts {
			md.kill(m)
		} else {
			md.toReady(m)
		}
		return
	case sec < md.cursor+Slots:
		m.loc = mlWheel
		md.gen++
		m.gen = md.gen
	default:
		m.loc = mlOverflow
	}
	m.lease = lease
	m.state = StateDelayed
	if lease {
		m.state = StateReserved
	}
}

func (md *refModel) toReady(m *mMsg) {
	md.dirty[m.ID] = true
	clearLeaseM(m)
	m.loc, m.state = mlReady, StateReady
}

func (md *refModel) kill(m *mMsg) {
	md.dirty[m.ID] = true
	clearLeaseM(m)
	m.loc, m.state = mlDead, StateDead
	md.releaseKey(m)
}

func (md *refModel) releaseKey(m *mMsg) {
	if m.Key == "" {
		return
	}
	tk := mTopicKey{m.Topic, m.Key}
	if id, ok := md.keys[tk]; ok && id == m.ID {
		delete(md.keys, tk)
	}
}

func (md *refModel) finish(m *mMsg) {
	md.dirty[m.ID] = true
	md.releaseKey(m)
	delete(md.msgs, m.ID)
}

func (md *refModel) schedule(c command.Schedule) command.Result {
	out := make([]Enqueued, 0, len(c.Messages))
	for _, nm := range c.Messages {
		md.topics[nm.Topic] = true
		if nm.Key != "" {
			if id, ok := md.keys[mTopicKey{nm.Topic, nm.Key}]; ok {
				out = append(out, Enqueued{ID: id, DeliverAtMs: md.msgs[id].DeliverAtMs, Duplicate: true})
				continue
			}
		}
		id := model.ID{Index: md.index, Seq: uint32(md.group)<<24 | md.seq}
		md.seq++
		m := &mMsg{Message: model.Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: append([]byte(nil), nm.Body...),
			Headers: nm.Headers, Priority: nm.Priority, DeliverAtMs: mClamp(nm.DeliverAtMs), TTRMs: nm.TTRMs,
			MaxAttempts: nm.MaxAttempts, EnqueuedMs: c.NowMs}}
		if m.TTRMs <= 0 {
			m.TTRMs = DefaultTTRMs
		}
		if m.MaxAttempts <= 0 {
			m.MaxAttempts = DefaultMaxAttempts
		}
		md.msgs[id] = m
		md.created = append(md.created, id)
		md.order = append(md.order, id)
		if nm.Key != "" {
			md.keys[mTopicKey{nm.Topic, nm.Key}] = id
		}
		md.place(m, false)
		out = append(out, Enqueued{ID: id, DeliverAtMs: m.DeliverAtMs})
	}
	return command.Result{Value: out}
}

func (md *refModel) cancel(c command.Cancel) command.Result {
	id := c.ID
	if c.Topic != "" {
		var ok bool
		if id, ok = md.keys[mTopicKey{c.Topic, c.Key}]; !ok {
			return command.Result{Err: model.ErrNotFound}
		}
	}
	m := md.msgs[id]
	switch {
	case m == nil:
		return command.Result{Err: model.ErrNotFound}
	case m.state == StateReserved:
		return command.Result{Err: model.ErrConflict}
	}
	md.finish(m)
	return command.Result{Value: id}
}

func (md *refModel) reschedule(c command.Reschedule) command.Result {
	m := md.msgs[c.ID]
	switch {
	case m == nil:
		return command.Result{Err: model.ErrNotFound}
	case m.state != StateDelayed && m.state != StateReady:
		return command.Result{Err: model.ErrConflict}
	}
	m.DeliverAtMs = mClamp(c.DeliverAtMs)
	md.place(m, false)
	return command.Result{Value: m.DeliverAtMs}
}

func (md *refModel) lease(c command.Lease) command.Result {
	took := make([]bool, len(c.Items))
	for i, it := range c.Items {
		m := md.msgs[it.ID]
		if m == nil {
			continue
		}
		leasable := m.state == StateDelayed || m.state == StateReady ||
			(m.state == StateReserved && m.LeaseExpiresMs < c.NowMs)
		if !leasable || m.Attempts >= m.MaxAttempts {
			continue
		}
		m.Attempts++
		m.Receipt = it.Nonce
		m.LeaseExpiresMs = it.ExpiresMs
		m.LeaseMs = it.ExpiresMs - c.NowMs
		m.DeliverAtMs = mClamp(max(it.RedeliverMs, it.ExpiresMs))
		md.place(m, true)
		took[i] = true
	}
	return command.Result{Value: took}
}

// held returns the message a receipt holds if the receipt is valid at now.
func (md *refModel) held(r model.Receipt, now int64) *mMsg {
	m := md.msgs[r.ID]
	if m == nil || m.state != StateReserved || m.Receipt != r.Nonce || now > m.LeaseExpiresMs {
		return nil
	}
	return m
}

func (md *refModel) ack(c command.Ack) command.Result {
	var n command.Counted
	for _, r := range c.Receipts {
		m := md.held(r, c.NowMs)
		if m == nil {
			n.Stale++
			continue
		}
		md.finish(m)
		n.Done++
	}
	return command.Result{Value: n}
}

func (md *refModel) nack(c command.Nack) command.Result {
	var n command.Counted
	for _, r := range c.Receipts {
		m := md.held(r, c.NowMs)
		if m == nil {
			n.Stale++
			continue
		}
		if m.Attempts >= m.MaxAttempts {
			md.kill(m)
		} else {
			clearLeaseM(m)
			m.DeliverAtMs = mClamp(c.NowMs + max(c.DelayMs, 0))
			md.place(m, false)
		}
		n.Done++
	}
	return command.Result{Value: n}
}

func (md *refModel) touch(c command.Touch) command.Result {
	var n command.Counted
	for _, r := range c.Receipts {
		m := md.held(r, c.NowMs)
		if m == nil {
			n.Stale++
			continue
		}
		// The redelivery keeps its distance from the lease expiry.
		backoff := max(m.DeliverAtMs-m.LeaseExpiresMs, 0)
		m.LeaseExpiresMs = c.NowMs + m.LeaseMs
		m.DeliverAtMs = mClamp(m.LeaseExpiresMs + backoff)
		md.place(m, true)
		n.Done++
	}
	return command.Result{Value: n}
}

// bury kills reserved messages out of attempts whose lease ended before
// c.NowMs.
func (md *refModel) bury(c command.Bury) command.Result {
	var n command.Counted
	for _, r := range c.Receipts {
		m := md.msgs[r.ID]
		if m == nil || m.state != StateReserved || m.Receipt != r.Nonce || m.LeaseExpiresMs >= c.NowMs || m.Attempts < m.MaxAttempts {
			n.Stale++
			continue
		}
		md.kill(m)
		n.Done++
	}
	return command.Result{Value: n}
}

// expire fires every slot before the second before and reports whether the
// cursor moved.
func (md *refModel) expire(before int64) bool {
	if before <= md.cursor {
		return false
	}
	for _, id := range md.live() {
		m := md.msgs[id]
		if m == nil || m.loc != mlWheel || m.DeliverAtMs/TickMs >= before {
			continue
		}
		if m.lease && m.Attempts >= m.MaxAttempts {
			md.kill(m)
		} else {
			md.toReady(m)
		}
	}
	md.cursor = before
	return true
}

func (md *refModel) promote(before int64) int {
	b := min(before, md.cursor+Slots)
	if b <= 0 {
		return 0
	}
	var move []*mMsg
	for _, id := range md.live() {
		if m := md.msgs[id]; m != nil && m.loc == mlOverflow && m.DeliverAtMs < b*TickMs {
			move = append(move, m)
		}
	}
	for _, m := range move {
		md.place(m, m.lease)
	}
	return len(move)
}

func (md *refModel) redrive(c command.Redrive) command.Result {
	if !md.topics[c.Topic] {
		return command.Result{Value: 0}
	}
	ids := c.IDs
	if len(ids) == 0 {
		for _, id := range md.live() {
			if m := md.msgs[id]; m != nil && m.state == StateDead && m.Topic == c.Topic {
				ids = append(ids, id)
			}
		}
	}
	n := 0
	for _, id := range ids {
		m := md.msgs[id]
		if m == nil || m.state != StateDead || m.Topic != c.Topic {
			continue
		}
		m.Attempts = 0
		m.DeliverAtMs = mClamp(c.NowMs)
		if m.Key != "" {
			tk := mTopicKey{m.Topic, m.Key}
			if _, taken := md.keys[tk]; taken {
				m.Key = "" // a newer message holds the key
			} else {
				md.keys[tk] = id
			}
		}
		md.toReady(m)
		n++
	}
	return command.Result{Value: n}
}

// ---------------------------------------------------------------------------
// The harness: generator, store, log, checks.

type logEntry struct {
	index uint64
	data  []byte           // the encoded entry, as Raft would carry it
	want  []command.Result // the model's results
	now   int64
}

type modelHarness struct {
	t    *testing.T
	seed int64
	rng  *rand.Rand
	fs   *vfs.MemFS
	dir  string
	// group is the store's group (Options.Group).
	group int
	s     *Store
	opts  Options
	l     *Loader
	// rep is a replica that applies the same log one entry at a time,
	// with no loader attached and no crash: its state must match s.
	rep    *Store
	md     *refModel
	log    []*logEntry
	now    int64
	nonce  uint64
	issued []model.Receipt
	// durable is the highest index the store must keep through a crash:
	// the last Sync, Close, or Apply under SyncEveryBatch.
	durable uint64
	// popped holds, per id, the placement generation the loader yielded.
	popped map[model.ID]int
	step   int
	phase  string // what the step is doing, for failure messages
	stats  map[string]int
}

var (
	modelTopics = []string{"alpha", "beta", "gamma"}
	modelKeys   = []string{"k1", "k2", "k3", "k4"}
)

func runModel(t *testing.T, seed int64, steps, group int) {
	h := &modelHarness{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), fs: vfs.NewStrictMem(),
		dir: "/db", group: group, md: newRefModel(group), popped: map[model.ID]int{}, stats: map[string]int{}}
	h.now = 1_700_000_000_000 + h.rng.Int63n(86_400_000)
	h.open()
	rep, err := Open("/replica", Options{FS: vfs.NewMem(), Group: group})
	if err != nil {
		t.Fatal(err)
	}
	h.rep = rep
	defer func() {
		if h.s != nil {
			h.s.Close()
		}
		h.rep.Close()
	}()
	// The leader's first entry starts the wheel at the current second.
	h.applyNew([][]command.Command{{command.Expire{Before: h.now / TickMs}, command.Promote{Before: h.now/TickMs + Slots}}})
	h.check(h.md, true)
	for h.step = 1; h.step <= steps; h.step++ {
		h.advance()
		h.phase = ""
		switch r := h.rng.Intn(1000); {
		case r < 10:
			h.crash()
			continue
		case r < 15:
			h.phase = "[clean restart] "
			h.stats["restart"]++
			h.closeStore()
			h.open()
			if a := h.s.AppliedIndex(); a != uint64(len(h.log)) {
				h.fatalf("after a clean restart AppliedIndex is %d, want %d", a, len(h.log))
			}
			h.checkOpts(h.md, true, true)
			continue
		case r < 18:
			h.inconsistent()
			continue
		case r < 28:
			h.stats["sync"]++
			a, err := h.s.Sync()
			if err != nil || a != uint64(len(h.log)) {
				h.fatalf("Sync = %d, %v; want %d", a, err, len(h.log))
			}
			h.durable = a
		case r < 35:
			h.stats["reattach"]++
			h.s.DetachLoader()
			h.l = NewLoader()
			h.s.AttachLoader(h.l)
			h.popped = map[model.ID]int{}
		}
		nEntries := 1
		if h.rng.Intn(10) < 3 {
			nEntries = 2 + h.rng.Intn(4)
		}
		batch := make([][]command.Command, nEntries)
		for i := range batch {
			n := 1
			if h.rng.Intn(4) == 0 {
				n = 2 + h.rng.Intn(3)
			}
			batch[i] = make([]command.Command, n)
		}
		h.applyNew(batch)
		full := *modelFull > 0 && h.step%*modelFull == 0
		h.check(h.md, full)
		if full {
			h.checkReplica()
		}
	}
	h.check(h.md, true)
	h.checkReplica()
	h.closeStore()
	h.open()
	h.checkOpts(h.md, true, true)
	h.checkReplica()
	t.Logf("seed %d: %d steps, %d entries, %d messages created, %d live %v, cursor %d, stats %v",
		seed, steps, len(h.log), len(h.md.created), len(h.md.msgs), h.md.histogram(), h.md.cursor, h.stats)
}

func (h *modelHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d step %d %s(rerun: go test ./wheel -run TestModel -model.seed %d -model.steps %d): ",
		h.seed, h.step, h.phase, h.seed, h.step)
	fmt.Fprintf(&b, format, args...)
	b.WriteString("\nlast entries:")
	for _, e := range h.log[max(0, len(h.log)-6):] {
		cmds, _ := command.DecodeCommands(e.data)
		fmt.Fprintf(&b, "\n  %d now=%d %s", e.index, e.now, fmtCmds(cmds))
	}
	h.t.Fatal(b.String())
}

func fmtCmds(cmds []command.Command) string {
	var parts []string
	for _, c := range cmds {
		switch c := c.(type) {
		case command.Schedule:
			var ms []string
			for _, m := range c.Messages {
				ms = append(ms, fmt.Sprintf("{%s/%s due=%d p=%d ttr=%d max=%d}", m.Topic, m.Key, m.DeliverAtMs, m.Priority, m.TTRMs, m.MaxAttempts))
			}
			parts = append(parts, fmt.Sprintf("Schedule%v", ms))
		default:
			parts = append(parts, fmt.Sprintf("%T%+v", c, c))
		}
	}
	return strings.Join(parts, " ")
}

func (h *modelHarness) open() {
	if err := h.tryOpen(); err != nil {
		h.fatalf("open: %v", err)
	}
}

// tryOpen opens the store with randomized options and attaches a loader.
func (h *modelHarness) tryOpen() error {
	h.opts = Options{FS: h.fs, Group: h.group}
	switch h.rng.Intn(4) {
	case 0:
		h.opts.MaxOpenSegments = 1
	case 1:
		h.opts.MaxOpenSegments = 3
	}
	h.opts.SyncEveryBatch = h.rng.Intn(8) == 0
	if h.rng.Intn(3) == 0 {
		h.opts.MemTableBytes = 64 << 10 // Pebble flushes by itself now and then
	}
	s, err := Open(h.dir, h.opts)
	if err != nil {
		return err
	}
	h.s = s
	h.l = NewLoader()
	s.AttachLoader(h.l)
	h.popped = map[model.ID]int{}
	return nil
}

func (h *modelHarness) closeStore() {
	if err := h.s.Close(); err != nil {
		h.fatalf("close: %v", err)
	}
	h.s = nil
	h.durable = uint64(len(h.log))
}

// advance moves the simulated clock: mostly by fractions of a second,
// sometimes by minutes, rarely across the two-hour horizon or by a day.
func (h *modelHarness) advance() {
	var d int64
	switch r := h.rng.Intn(1000); {
	case r < 500:
		d = h.rng.Int63n(400)
	case r < 850:
		d = h.rng.Int63n(1500)
	case r < 965:
		d = h.rng.Int63n(10_000)
	case r < 990:
		d = h.rng.Int63n(120_000)
	case r < 996:
		d = Slots*TickMs + h.rng.Int63n(600_000) - 300_000
	default:
		d = h.rng.Int63n(30 * 3600_000)
	}
	h.now += d
	// Now and then land exactly on an instant that matters, or just after it:
	// a due time or a lease expiry.
	if h.rng.Intn(8) == 0 {
		var next []int64
		for _, id := range h.md.live() {
			m := h.md.msgs[id]
			if m == nil {
				continue
			}
			for _, at := range []int64{m.DeliverAtMs, m.LeaseExpiresMs} {
				if at > h.now && at < h.now+5000 {
					next = append(next, at)
				}
			}
		}
		if len(next) > 0 {
			h.now = next[h.rng.Intn(len(next))] + h.rng.Int63n(2)
		}
	}
}

// applyNew fills the command slots of batch (one slice per entry) from the
// generator, runs them through the model and then, as one Apply call,
// through the store, and compares the results.
func (h *modelHarness) applyNew(batch [][]command.Command) {
	var es []*logEntry
	for _, cmds := range batch {
		e := &logEntry{index: uint64(len(h.log)) + 1, now: h.now}
		h.md.begin(e.index)
		for j := range cmds {
			if cmds[j] == nil {
				cmds[j] = h.genCmd()
			}
			e.want = append(e.want, h.md.apply(cmds[j]))
		}
		e.data = command.EncodeCommands(cmds)
		h.log = append(h.log, e)
		es = append(es, e)
	}
	h.applyLogged(es, 0)
	h.applyReplica(es)
}

// applyReplica applies logged entries to the replica, one Apply call each,
// and compares the results with the model's.
func (h *modelHarness) applyReplica(es []*logEntry) {
	for _, e := range es {
		cmds, err := command.DecodeCommands(e.data)
		if err != nil {
			h.fatalf("decode entry %d: %v", e.index, err)
		}
		res, err := h.rep.Apply([]Entry{{Index: e.index, Cmds: cmds}})
		if err != nil {
			h.fatalf("replica: apply entry %d: %v", e.index, err)
		}
		for j, want := range e.want {
			if !resultEqual(want, res[0][j]) {
				h.fatalf("replica: entry %d command %d %s: result %s, model says %s", e.index, j, fmtCmds(cmds[j:j+1]), fmtResult(res[0][j]), fmtResult(want))
			}
		}
	}
}

// checkReplica compares the dumps of the store and the replica, which have
// applied the same log.
func (h *modelHarness) checkReplica() {
	h.t.Helper()
	var got, want bytes.Buffer
	if err := h.s.Dump(&got); err != nil {
		h.fatalf("dump: %v", err)
	}
	if err := h.rep.Dump(&want); err != nil {
		h.fatalf("replica dump: %v", err)
	}
	if got.String() != want.String() {
		h.fatalf("the store and its replica differ at applied index %d:\n%s", h.s.AppliedIndex(), lineDiff(got.String(), want.String()))
	}
	for _, s := range []*Store{h.s, h.rep} {
		if err := checkMetaCache(s); err != nil {
			h.fatalf("%v", err)
		}
		if err := checkScheduleCache(s); err != nil {
			h.fatalf("%v", err)
		}
	}
	h.stats["replicaChecks"]++
}

// checkMetaCache checks the invariant of the store's meta cache: every
// meta it holds is the one the index stores for its message.
func checkMetaCache(s *Store) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.metas.lru.Keys() {
		cached, _ := s.metas.lru.Peek(id)
		v, err := s.get(metaKey(id))
		if err != nil {
			return err
		}
		if v == nil || isGoneMark(v) {
			return fmt.Errorf("meta cache holds %s, whose meta the index does not store: %+v", id, cached)
		}
		stored, err := decodeMeta(v)
		if err != nil {
			return err
		}
		if stored != cached {
			return fmt.Errorf("meta cache holds %s as %+v, the index as %+v", id, cached, stored)
		}
	}
	return nil
}

// checkScheduleCache checks the invariant of the store's schedule cache:
// every schedule it holds is the one the index stores, decoded.
func checkScheduleCache(s *Store) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.scheds.lru.Keys() {
		cached, _ := s.scheds.lru.Peek(name)
		stored, ok, err := readSchedule(name, s.get)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("schedule cache holds %q, which the index does not store: %+v", name, cached)
		}
		if !reflect.DeepEqual(stored, cached) {
			return fmt.Errorf("schedule cache holds %q as %+v, the index as %+v", name, cached, stored)
		}
	}
	return nil
}

// lineDiff lists the lines only a or only b holds (at most 20 of each).
func lineDiff(a, b string) string {
	inB := map[string]bool{}
	for _, l := range strings.Split(b, "\n") {
		inB[l] = true
	}
	inA := map[string]bool{}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		inA[l] = true
		if !inB[l] && len(out) < 20 {
			out = append(out, "store:   "+l)
		}
	}
	n := len(out)
	for _, l := range strings.Split(b, "\n") {
		if !inA[l] && len(out) < n+20 {
			out = append(out, "replica: "+l)
		}
	}
	return strings.Join(out, "\n")
}

// applyLogged applies logged entries as one Apply call. Entries at or below
// skipped must have been skipped by the store (nil results).
func (h *modelHarness) applyLogged(es []*logEntry, skipped uint64) {
	entries := make([]Entry, len(es))
	for i, e := range es {
		cmds, err := command.DecodeCommands(e.data)
		if err != nil {
			h.fatalf("decode entry %d: %v", e.index, err)
		}
		entries[i] = Entry{Index: e.index, Cmds: cmds}
	}
	res, err := h.s.Apply(entries)
	if err != nil {
		h.fatalf("apply entries %d..%d: %v", es[0].index, es[len(es)-1].index, err)
	}
	if len(res) != len(es) {
		h.fatalf("apply returned %d results for %d entries", len(res), len(es))
	}
	for i, e := range es {
		if e.index <= skipped {
			if res[i] != nil {
				h.fatalf("entry %d was applied before; replay returned %v", e.index, res[i])
			}
			continue
		}
		if len(res[i]) != len(e.want) {
			h.fatalf("entry %d: %d results, want %d", e.index, len(res[i]), len(e.want))
		}
		cmds, _ := command.DecodeCommands(e.data)
		for j, want := range e.want {
			if !resultEqual(want, res[i][j]) {
				h.fatalf("entry %d command %d %s: result %s, model says %s", e.index, j, fmtCmds(cmds[j:j+1]), fmtResult(res[i][j]), fmtResult(want))
			}
		}
		if *modelTrace {
			h.t.Logf("%d now=%d %s => %v", e.index, e.now, fmtCmds(cmds), e.want)
		}
	}
	if h.opts.SyncEveryBatch {
		h.durable = max(h.durable, es[len(es)-1].index)
	}
}

func resultEqual(want, got command.Result) bool {
	if want.Err != nil {
		return got.Err != nil && errors.Is(got.Err, want.Err)
	}
	return got.Err == nil && reflect.DeepEqual(want.Value, got.Value)
}

func fmtResult(r command.Result) string {
	if r.Err != nil {
		return "error(" + r.Err.Error() + ")"
	}
	return fmt.Sprintf("%T%+v", r.Value, r.Value)
}

// ---------------------------------------------------------------------------
// Command generation.

func (h *modelHarness) genCmd() command.Command {
	for {
		var c command.Command
		switch r := h.rng.Intn(100); {
		case r < 25:
			c = h.genSchedule()
		case r < 28:
			c = h.genRecurring()
		case r < 35:
			c = h.genCancel()
		case r < 40:
			c = h.genReschedule()
		case r < 55:
			c = h.genLease()
		case r < 64:
			c = h.genAck()
		case r < 70:
			c = h.genNack()
		case r < 72:
			c = h.genTouch()
		case r < 74:
			c = command.Bury{NowMs: h.now, Receipts: h.genReceipts()}
		case r < 86:
			c = h.genExpire()
		case r < 94:
			c = h.genPromote()
		case r < 98:
			c = h.genRedrive()
		default:
			id := fmt.Sprintf("n%d", h.rng.Intn(3))
			if h.rng.Intn(3) == 0 {
				c = command.RemoveNode{ID: id}
			} else {
				c = command.SetNode{Node: model.Member{ID: id, RaftAddr: fmt.Sprintf("10.0.0.%d:7000", h.rng.Intn(9)), HTTPAddr: "h:1"}}
			}
		}
		if c != nil {
			h.stats[fmt.Sprintf("%T", c)[len("wheel."):]]++
			return c
		}
	}
}

// genDue picks a due instant: in the past, inside the current second, a
// little ahead, anywhere in the horizon, at its edge, beyond it, or absurd.
func (h *modelHarness) genDue() int64 {
	now, r := h.now, h.rng.Intn(100)
	switch {
	case r < 10:
		return now - h.rng.Int63n(10_000)
	case r < 28:
		return now + h.rng.Int63n(TickMs-now%TickMs)
	case r < 40:
		return now + h.rng.Int63n(3000)
	case r < 65:
		return now + h.rng.Int63n(Slots*TickMs)
	case r < 75:
		return (h.md.cursor+Slots)*TickMs + h.rng.Int63n(4000) - 2000
	case r < 92:
		return now + Slots*TickMs + h.rng.Int63n(3*86_400_000)
	case r < 95:
		return -h.rng.Int63n(1000)
	case r < 97:
		return MaxDueMs - 1000 + h.rng.Int63n(3000)
	default:
		return now
	}
}

func (h *modelHarness) pick(ids []model.ID) model.ID { return ids[h.rng.Intn(len(ids))] }

// liveIDs returns the existing messages that satisfy f, in id order.
func (h *modelHarness) liveIDs(f func(m *mMsg) bool) []model.ID {
	var out []model.ID
	for _, id := range h.md.live() {
		if m := h.md.msgs[id]; m != nil && (f == nil || f(m)) {
			out = append(out, id)
		}
	}
	return out
}

// anyID returns an existing id, most of the time, else any id ever created
// or one that never existed.
func (h *modelHarness) anyID(live []model.ID) model.ID {
	switch r := h.rng.Intn(10); {
	case r < 7 && len(live) > 0:
		return h.pick(live)
	case r < 9 && len(h.md.created) > 0:
		return h.pick(h.md.created)
	default:
		return model.ID{Index: uint64(len(h.log)) + 1000, Seq: model.SeqOf(h.group, uint32(h.rng.Intn(3)))}
	}
}

func (h *modelHarness) genSchedule() command.Command {
	n := 1 + h.rng.Intn(3)
	if h.rng.Intn(10) == 0 {
		n = 4 + h.rng.Intn(8)
	}
	if h.rng.Intn(50) == 0 {
		n = 0
	}
	c := command.Schedule{NowMs: h.now, Messages: make([]command.NewMessage, n)}
	for i := range c.Messages {
		m := &c.Messages[i]
		m.Topic = modelTopics[h.rng.Intn(len(modelTopics))]
		if h.rng.Intn(10) < 4 {
			m.Key = modelKeys[h.rng.Intn(len(modelKeys))]
		}
		if l := h.rng.Intn(40); l > 0 {
			m.Body = make([]byte, l)
			h.rng.Read(m.Body)
		}
		if h.rng.Intn(5) == 0 {
			m.Headers = map[string]string{"trace": fmt.Sprint(h.rng.Intn(100)), "x": ""}
		}
		switch r := h.rng.Intn(10); {
		case r < 5:
		case r < 9:
			m.Priority = int64(h.rng.Intn(11) - 5)
		default:
			m.Priority = h.rng.Int63() - h.rng.Int63()
		}
		m.DeliverAtMs = h.genDue()
		switch r := h.rng.Intn(10); {
		case r < 3:
		case r < 9:
			m.TTRMs = 100 + h.rng.Int63n(5000)
		default:
			m.TTRMs = -h.rng.Int63n(10)
		}
		switch r := h.rng.Intn(10); {
		case r < 3:
		case r < 9:
			m.MaxAttempts = int32(1 + h.rng.Intn(3))
		default:
			m.MaxAttempts = -1
		}
	}
	return c
}

func (h *modelHarness) genCancel() command.Command {
	if h.rng.Intn(10) < 4 {
		topic := modelTopics[h.rng.Intn(len(modelTopics))]
		if h.rng.Intn(20) == 0 {
			topic = "nosuchtopic"
		}
		key := modelKeys[h.rng.Intn(len(modelKeys))]
		if h.rng.Intn(20) == 0 {
			key = ""
		}
		return command.Cancel{Topic: topic, Key: key}
	}
	return command.Cancel{ID: h.anyID(h.liveIDs(nil))}
}

func (h *modelHarness) genReschedule() command.Command {
	return command.Reschedule{ID: h.anyID(h.liveIDs(nil)), DeliverAtMs: h.genDue()}
}

func (h *modelHarness) genLease() command.Command {
	now := h.now
	due := h.liveIDs(func(m *mMsg) bool {
		return ((m.state == StateDelayed || m.state == StateReady) && m.DeliverAtMs <= now) ||
			(m.state == StateReserved && m.LeaseExpiresMs <= now) // == now: still held, a no-op
	})
	c := command.Lease{NowMs: now}
	n := 1 + h.rng.Intn(4)
	if len(due) > 40 {
		n += h.rng.Intn(len(due) / 4) // keep up with the backlog, as a leader would
	}
	for i := 0; i < n; i++ {
		var id model.ID
		switch r := h.rng.Intn(20); {
		case r < 17 && len(due) > 0:
			id = h.pick(due)
		case r < 19:
			id = h.anyID(h.liveIDs(nil))
		default:
			if len(c.Items) == 0 {
				continue
			}
			id = c.Items[0].ID // handed out twice: the second is a no-op
		}
		ttr := int64(DefaultTTRMs)
		if m := h.md.msgs[id]; m != nil {
			ttr = m.TTRMs
		}
		h.nonce++
		it := command.LeaseItem{ID: id, Nonce: h.nonce}
		switch r := h.rng.Intn(10); {
		case r < 5:
			it.ExpiresMs = now + ttr
		case r < 9:
			it.ExpiresMs = now + h.rng.Int63n(3000)
		default:
			it.ExpiresMs = now + h.rng.Int63n(120_000)
		}
		switch r := h.rng.Intn(20); {
		case r < 12:
			it.RedeliverMs = it.ExpiresMs
		case r < 18:
			it.RedeliverMs = it.ExpiresMs + h.rng.Int63n(5000)
		case r < 19:
			it.RedeliverMs = it.ExpiresMs + Slots*TickMs + h.rng.Int63n(4*3600_000)
		default:
			it.RedeliverMs = it.ExpiresMs - h.rng.Int63n(1000) // the store uses the later of the two
		}
		c.Items = append(c.Items, it)
		h.issued = append(h.issued, model.Receipt{ID: id, Nonce: it.Nonce})
	}
	if len(c.Items) == 0 {
		return nil
	}
	return c
}

func (h *modelHarness) genReceipts() []model.Receipt {
	reserved := h.liveIDs(func(m *mMsg) bool { return m.state == StateReserved })
	var out []model.Receipt
	n := 1 + h.rng.Intn(3)
	if len(reserved) > 40 {
		n += h.rng.Intn(len(reserved) / 4)
	}
	for i := 0; i < n; i++ {
		switch r := h.rng.Intn(20); {
		case r < 14 && len(reserved) > 0:
			m := h.md.msgs[h.pick(reserved)]
			out = append(out, model.Receipt{ID: m.ID, Nonce: m.Receipt})
		case r < 17 && len(h.issued) > 0:
			out = append(out, h.issued[h.rng.Intn(len(h.issued))]) // often an old one
		case r < 18 && len(out) > 0:
			out = append(out, out[0]) // the same receipt twice
		default:
			out = append(out, model.Receipt{ID: h.anyID(reserved), Nonce: uint64(h.rng.Int63())})
		}
	}
	return out
}

func (h *modelHarness) genAck() command.Command {
	return command.Ack{NowMs: h.now, Receipts: h.genReceipts()}
}

func (h *modelHarness) genNack() command.Command {
	c := command.Nack{NowMs: h.now, Receipts: h.genReceipts()}
	switch r := h.rng.Intn(10); {
	case r < 3:
	case r < 7:
		c.DelayMs = h.rng.Int63n(5000)
	case r < 8:
		c.DelayMs = h.rng.Int63n(Slots * TickMs)
	case r < 9:
		c.DelayMs = Slots*TickMs + h.rng.Int63n(86_400_000)
	default:
		c.DelayMs = -h.rng.Int63n(10_000)
	}
	return c
}

func (h *modelHarness) genTouch() command.Command {
	return command.Touch{NowMs: h.now, Receipts: h.genReceipts()}
}

func (h *modelHarness) genExpire() command.Command {
	sec := h.now / TickMs
	switch r := h.rng.Intn(20); {
	case r < 13:
		return command.Expire{Before: sec}
	case r < 17:
		return command.Expire{Before: sec - h.rng.Int63n(4)}
	case r < 19:
		return command.Expire{Before: sec - h.rng.Int63n(200)}
	default:
		return command.Expire{Before: h.md.cursor - h.rng.Int63n(3)} // nothing to do
	}
}

func (h *modelHarness) genPromote() command.Command {
	switch r := h.rng.Intn(10); {
	case r < 7:
		return command.Promote{Before: h.md.cursor + Slots}
	case r < 9:
		return command.Promote{Before: h.now/TickMs + h.rng.Int63n(Slots+100)}
	default:
		return command.Promote{Before: h.rng.Int63n(3)}
	}
}

func (h *modelHarness) genRedrive() command.Command {
	topic := modelTopics[h.rng.Intn(len(modelTopics))]
	if h.rng.Intn(30) == 0 {
		topic = "nosuchtopic"
	}
	c := command.Redrive{NowMs: h.now, Topic: topic}
	if h.rng.Intn(2) == 0 {
		dead := h.liveIDs(func(m *mMsg) bool { return m.state == StateDead })
		for i, n := 0, 1+h.rng.Intn(3); i < n; i++ {
			c.IDs = append(c.IDs, h.anyID(dead))
		}
	}
	return c
}

// ---------------------------------------------------------------------------
// Crashes and damage.

// crash drops every unsynced write, sometimes damages a segment tail,
// reopens, checks the recovered state against the model at AppliedIndex and
// replays the rest of the log.
func (h *modelHarness) crash() {
	h.phase = fmt.Sprintf("[crash, durable index %d, MaxOpenSegments %d, SyncEveryBatch %v] ", h.durable, h.opts.MaxOpenSegments, h.opts.SyncEveryBatch)
	h.stats["crash"]++
	h.s.CrashForTest(h.fs)
	h.s = nil
	if h.rng.Intn(2) == 0 {
		h.tearTail()
	}
	if err := h.tryOpen(); err != nil {
		h.fatalf("Open after a crash: %v", err)
	}
	a, last := h.s.AppliedIndex(), uint64(len(h.log))
	if a < h.durable || a > last {
		h.fatalf("after a crash AppliedIndex is %d; the durable index was %d and the log ends at %d", a, h.durable, last)
	}
	h.check(h.modelAt(a), true)
	start := a + 1
	if h.rng.Intn(4) == 0 {
		start = 1 // replay everything: entries up to a must be no-ops
	}
	for i := start; i <= last; {
		n := uint64(1 + h.rng.Intn(8))
		h.applyLogged(h.log[i-1:min(i-1+n, last)], a)
		i += n
	}
	if got := h.s.AppliedIndex(); got != last {
		h.fatalf("after replay AppliedIndex is %d, want %d", got, last)
	}
	h.checkOpts(h.md, true, true)
}

// modelAt rebuilds the model from the first n log entries.
func (h *modelHarness) modelAt(n uint64) *refModel {
	md := newRefModel(h.group)
	for _, e := range h.log[:n] {
		cmds, err := command.DecodeCommands(e.data)
		if err != nil {
			h.fatalf("decode %d: %v", e.index, err)
		}
		md.begin(e.index)
		for _, c := range cmds {
			md.apply(c)
		}
	}
	return md
}

func (h *modelHarness) segmentFiles() []string {
	dir := h.fs.PathJoin(h.dir, "segments")
	names, err := h.fs.List(dir)
	if err != nil {
		h.fatalf("list segments: %v", err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, segment.Ext) {
			out = append(out, h.fs.PathJoin(dir, n))
		}
	}
	sort.Strings(out)
	return out
}

func readFS(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeFS replaces path with data, synced. It writes a copy: Pebble's
// MemFS scribbles over written buffers in builds with invariants (-race).
func writeFS(fs vfs.FS, path string, data []byte) error {
	f, err := fs.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(append([]byte(nil), data...)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tearTail appends what a crash in the middle of an append can leave past
// the end of a segment file: junk, zeros, a whole record of a lost entry,
// or part of one. Open must cut it.
func (h *modelHarness) tearTail() {
	files := h.segmentFiles()
	if len(files) == 0 {
		return
	}
	h.stats["tear"]++
	path := files[h.rng.Intn(len(files))]
	var junk []byte
	switch h.rng.Intn(4) {
	case 0:
		junk = make([]byte, 1+h.rng.Intn(60))
		h.rng.Read(junk)
	case 1:
		junk = make([]byte, 1+h.rng.Intn(60))
	case 2, 3:
		payload := EncodeMessage(nil, &model.Message{ID: model.ID{Index: uint64(len(h.log)) + 1}, Topic: "alpha", Body: []byte("lost")})
		junk = segment.AppendRecord(nil, segment.Record{Type: segment.TypeMessage, Index: uint64(len(h.log)) + 1, Payload: payload})
		if h.rng.Intn(2) == 0 {
			junk = junk[:1+h.rng.Intn(len(junk)-1)]
		}
	}
	f, err := h.fs.OpenReadWrite(path)
	if err != nil {
		h.fatalf("open %s: %v", path, err)
	}
	st, err := f.Stat()
	if err == nil {
		_, err = f.WriteAt(append([]byte(nil), junk...), st.Size())
	}
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		h.fatalf("tear %s: %v", path, err)
	}
}

// inconsistent closes the store cleanly, cuts or removes a segment file the
// index covers, checks that Open refuses with ErrInconsistent, restores the
// file and reopens.
func (h *modelHarness) inconsistent() {
	h.phase = "[close, damage, reopen] "
	h.closeStore()
	files := h.segmentFiles()
	if len(files) > 0 {
		h.stats["inconsistent"]++
		path := files[h.rng.Intn(len(files))]
		data, err := readFS(h.fs, path)
		if err != nil {
			h.fatalf("read %s: %v", path, err)
		}
		if h.rng.Intn(4) == 0 {
			err = h.fs.Remove(path)
		} else {
			err = writeFS(h.fs, path, data[:h.rng.Intn(len(data))])
		}
		if err != nil {
			h.fatalf("damage %s: %v", path, err)
		}
		s, err := Open(h.dir, Options{FS: h.fs, Group: h.group})
		if err == nil {
			s.Close()
			h.fatalf("Open succeeded with segment %s cut from %d bytes", path, len(data))
		}
		if !errors.Is(err, ErrInconsistent) {
			h.fatalf("Open with segment %s cut: %v, want ErrInconsistent", path, err)
		}
		if err := writeFS(h.fs, path, data); err != nil {
			h.fatalf("restore %s: %v", path, err)
		}
	}
	h.open()
	h.check(h.md, true)
}

// ---------------------------------------------------------------------------
// Comparing the store with the model.

// check compares the store with md: the messages changed since the last
// check, or with full every existing message and, on reopen (all), every
// message ever created, else a sample of the finished ones; then counts,
// queues, the wheel and the loader.
func (h *modelHarness) check(md *refModel, full bool) { h.checkOpts(md, full, false) }

func (h *modelHarness) checkOpts(md *refModel, full, all bool) {
	h.t.Helper()
	if c := h.s.Cursor(); c != md.cursor {
		h.fatalf("cursor %d, model %d", c, md.cursor)
	}
	if all {
		for _, id := range md.created {
			h.checkGet(md, id)
		}
	} else if full {
		for _, id := range md.live() {
			h.checkGet(md, id)
		}
		for i := 0; i < 100 && len(md.created) > 0; i++ {
			h.checkGet(md, md.created[h.rng.Intn(len(md.created))])
		}
	} else {
		ids := make([]model.ID, 0, len(md.dirty))
		for id := range md.dirty {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
		for _, id := range ids {
			h.checkGet(md, id)
		}
	}
	clear(md.dirty)
	h.checkTopics(md)
	h.checkSchedules(md)
	h.checkQueues(md)
	h.checkWheel(md)
	h.checkLoader(md)
	if got, want := h.s.Nodes(), sortedNodes(md.nodes); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		h.fatalf("nodes %+v, model %+v", got, want)
	}
}

func sortedNodes(m map[string]model.Member) []model.Member {
	out := make([]model.Member, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (h *modelHarness) checkGet(md *refModel, id model.ID) {
	v, err := h.s.Get(id)
	m := md.msgs[id]
	if m == nil {
		if !errors.Is(err, model.ErrNotFound) {
			h.fatalf("Get(%s) = %s %v; the model has no such message", id, fmtView(v), err)
		}
		return
	}
	if err != nil {
		h.fatalf("Get(%s): %v; model has %s", id, err, fmtModel(m))
	}
	if d := viewDiff(v.Message, v.State, m); d != "" {
		h.fatalf("Get(%s): %s\n store %s\n model %s", id, d, fmtView(v), fmtModel(m))
	}
}

func fmtView(v View) string {
	return fmt.Sprintf("{%s %s/%s due=%d att=%d/%d p=%d rcpt=%d exp=%d lease=%d}", v.State, v.Topic, v.Key,
		v.DeliverAtMs, v.Attempts, v.MaxAttempts, v.Priority, v.Receipt, v.LeaseExpiresMs, v.LeaseMs)
}

func fmtModel(m *mMsg) string {
	return fmt.Sprintf("{%s in %s lease=%v %s/%s due=%d att=%d/%d p=%d rcpt=%d exp=%d lease=%d}", m.state, m.loc, m.lease,
		m.Topic, m.Key, m.DeliverAtMs, m.Attempts, m.MaxAttempts, m.Priority, m.Receipt, m.LeaseExpiresMs, m.LeaseMs)
}

// viewDiff names the first field in which a message differs from the model.
func viewDiff(g model.Message, st State, m *mMsg) string {
	w := m.Message
	switch {
	case st != m.state:
		return fmt.Sprintf("state %s, model %s", st, m.state)
	case g.ID != w.ID:
		return fmt.Sprintf("id %s, model %s", g.ID, w.ID)
	case g.Topic != w.Topic || g.Key != w.Key:
		return fmt.Sprintf("topic/key %s/%s, model %s/%s", g.Topic, g.Key, w.Topic, w.Key)
	case !bytes.Equal(g.Body, w.Body):
		return fmt.Sprintf("body %q, model %q", g.Body, w.Body)
	case !(len(g.Headers) == 0 && len(w.Headers) == 0) && !reflect.DeepEqual(g.Headers, w.Headers):
		return fmt.Sprintf("headers %v, model %v", g.Headers, w.Headers)
	case g.Priority != w.Priority:
		return fmt.Sprintf("priority %d, model %d", g.Priority, w.Priority)
	case g.DeliverAtMs != w.DeliverAtMs:
		return fmt.Sprintf("deliver_at_ms %d, model %d", g.DeliverAtMs, w.DeliverAtMs)
	case g.TTRMs != w.TTRMs || g.MaxAttempts != w.MaxAttempts:
		return fmt.Sprintf("ttr/max %d/%d, model %d/%d", g.TTRMs, g.MaxAttempts, w.TTRMs, w.MaxAttempts)
	case g.Attempts != w.Attempts:
		return fmt.Sprintf("attempts %d, model %d", g.Attempts, w.Attempts)
	case g.EnqueuedMs != w.EnqueuedMs:
		return fmt.Sprintf("enqueued %d, model %d", g.EnqueuedMs, w.EnqueuedMs)
	case g.Receipt != w.Receipt || g.LeaseExpiresMs != w.LeaseExpiresMs || g.LeaseMs != w.LeaseMs:
		return fmt.Sprintf("lease %d/%d/%d, model %d/%d/%d", g.Receipt, g.LeaseExpiresMs, g.LeaseMs, w.Receipt, w.LeaseExpiresMs, w.LeaseMs)
	}
	return ""
}

func (h *modelHarness) checkTopics(md *refModel) {
	byTopic := map[string]*TopicCounts{}
	var want []TopicCounts
	for topic := range md.topics {
		want = append(want, TopicCounts{Topic: topic})
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Topic < want[j].Topic })
	for i := range want {
		byTopic[want[i].Topic] = &want[i]
	}
	for _, m := range md.msgs {
		c := byTopic[m.Topic]
		switch m.state {
		case StateDelayed:
			c.Delayed++
		case StateReady:
			c.Ready++
		case StateReserved:
			c.Reserved++
		case StateDead:
			c.Dead++
		}
	}
	got := h.s.Topics()
	if !(len(got) == 0 && len(want) == 0) && !reflect.DeepEqual(got, want) {
		h.fatalf("Topics() = %+v, model %+v", got, want)
	}
}

// checkQueues compares every topic's ready queue (due, then higher
// priority, then id) and dead letters (id order) with the model.
func (h *modelHarness) checkQueues(md *refModel) {
	for topic := range md.topics {
		var ready, dead []*mMsg
		for _, id := range md.live() {
			m := md.msgs[id]
			switch {
			case m == nil || m.Topic != topic:
			case m.state == StateReady:
				ready = append(ready, m)
			case m.state == StateDead:
				dead = append(dead, m)
			}
		}
		sort.SliceStable(ready, func(i, j int) bool { return dueLess(&ready[i].Message, &ready[j].Message) })
		got, err := h.s.Ready(topic, 1<<30, nil)
		if err != nil {
			h.fatalf("Ready(%s): %v", topic, err)
		}
		h.compareList("Ready("+topic+")", got, ready, StateReady)
		got, err = h.s.Dead(topic, 1<<30)
		if err != nil {
			h.fatalf("Dead(%s): %v", topic, err)
		}
		h.compareList("Dead("+topic+")", got, dead, StateDead)
	}
}

func dueLess(a, b *model.Message) bool {
	if a.DeliverAtMs != b.DeliverAtMs {
		return a.DeliverAtMs < b.DeliverAtMs
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.ID.Less(b.ID)
}

func (h *modelHarness) compareList(what string, got []View, want []*mMsg, st State) {
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(got):
			h.fatalf("%s: %d messages, model has %d; first missing %s %s", what, len(got), len(want), want[i].ID, fmtModel(want[i]))
		case i >= len(want):
			h.fatalf("%s: %d messages, model has %d; first extra %s %s", what, len(got), len(want), got[i].ID, fmtView(got[i]))
		case got[i].ID != want[i].ID:
			h.fatalf("%s[%d] is %s %s, model %s %s", what, i, got[i].ID, fmtView(got[i]), want[i].ID, fmtModel(want[i]))
		}
		if d := viewDiff(got[i].Message, got[i].State, want[i]); d != "" || got[i].State != st {
			h.fatalf("%s[%d] %s: %s", what, i, got[i].ID, d)
		}
	}
}

func (h *modelHarness) checkWheel(md *refModel) {
	w, err := h.s.Wheel()
	if err != nil {
		h.fatalf("Wheel: %v", err)
	}
	perSec := map[int64]int{}
	var overflow int64
	for _, m := range md.msgs {
		switch m.loc {
		case mlWheel:
			perSec[m.DeliverAtMs/TickMs]++
		case mlOverflow:
			overflow++
		}
	}
	if w.CursorMs != md.cursor*TickMs || w.HorizonMs != (md.cursor+Slots)*TickMs {
		h.fatalf("Wheel cursor %d horizon %d, model cursor second %d", w.CursorMs, w.HorizonMs, md.cursor)
	}
	if w.OverflowMessages != overflow {
		h.fatalf("Wheel overflow %d, model %d", w.OverflowMessages, overflow)
	}
	seen := map[int64]bool{}
	for _, sl := range w.NonEmpty {
		seen[sl.Second] = true
		if sl.Second < md.cursor || sl.Second >= md.cursor+Slots || sl.Slot != SlotOf(sl.Second) {
			h.fatalf("Wheel lists slot %d second %d outside the horizon [%d, %d)", sl.Slot, sl.Second, md.cursor, md.cursor+Slots)
		}
		if sl.Messages != perSec[sl.Second] {
			h.fatalf("Wheel second %d holds %d live records, model %d", sl.Second, sl.Messages, perSec[sl.Second])
		}
	}
	for sec, n := range perSec {
		if !seen[sec] {
			h.fatalf("Wheel does not list second %d, where the model has %d messages", sec, n)
		}
	}
	if o := h.s.OpenSegments(); h.opts.MaxOpenSegments > 0 && o > h.opts.MaxOpenSegments {
		h.fatalf("%d open segments, bound %d", o, h.opts.MaxOpenSegments)
	}
	// One slot in detail now and then.
	if len(w.NonEmpty) > 0 && h.rng.Intn(10) == 0 {
		sl := w.NonEmpty[h.rng.Intn(len(w.NonEmpty))]
		info, err := h.s.Slot(sl.Slot, true)
		if err != nil {
			h.fatalf("Slot(%d): %v", sl.Slot, err)
		}
		if info.Second != sl.Second || info.Messages != sl.Messages {
			h.fatalf("Slot(%d) = second %d messages %d, Wheel says %d/%d", sl.Slot, info.Second, info.Messages, sl.Second, sl.Messages)
		}
		var live []model.ID
		for _, r := range info.Records {
			if r.Live {
				live = append(live, r.ID)
			}
		}
		var want []model.ID
		for _, id := range md.live() {
			if m := md.msgs[id]; m != nil && m.loc == mlWheel && m.DeliverAtMs/TickMs == sl.Second {
				want = append(want, id)
			}
		}
		sort.Slice(live, func(i, j int) bool { return live[i].Less(live[j]) })
		if !(len(live) == 0 && len(want) == 0) && !reflect.DeepEqual(live, want) {
			h.fatalf("Slot(%d) second %d live records %v, model %v", sl.Slot, sl.Second, live, want)
		}
	}
}

// checkLoader loads the slots [cursor, cursor+2] and pops what is due: it
// must be exactly the model's due messages and unexpired-attempt leases in
// those slots not yielded since they were last placed, in (due, -priority,
// id) order, never one before its due millisecond.
func (h *modelHarness) checkLoader(md *refModel) {
	if _, err := h.s.LoadThrough(md.cursor + 2); err != nil {
		h.fatalf("LoadThrough(%d): %v", md.cursor+2, err)
	}
	got, next := h.l.PopDue(h.now)
	var want, rest []*mMsg
	for _, id := range md.live() {
		m := md.msgs[id]
		if m == nil || m.loc != mlWheel {
			continue
		}
		if sec := m.DeliverAtMs / TickMs; sec < md.cursor || sec > md.cursor+2 {
			continue
		}
		if h.popped[id] == m.gen {
			continue
		}
		if m.DeliverAtMs <= h.now {
			want = append(want, m)
		} else {
			rest = append(rest, m)
		}
	}
	sort.Slice(want, func(i, j int) bool { return dueLess(&want[i].Message, &want[j].Message) })
	for i := 0; i < max(len(got), len(want)); i++ {
		if i < len(got) && got[i].DeliverAtMs > h.now {
			h.fatalf("loader yielded %s due %d at %d, before its due time", got[i].ID, got[i].DeliverAtMs, h.now)
		}
		switch {
		case i >= len(got):
			h.fatalf("loader yielded %d messages at %d, model expects %d; first missing %s %s", len(got), h.now, len(want), want[i].ID, fmtModel(want[i]))
		case i >= len(want):
			h.fatalf("loader yielded %d messages at %d, model expects %d; first extra %s due %d", len(got), h.now, len(want), got[i].ID, got[i].DeliverAtMs)
		case got[i].ID != want[i].ID:
			h.fatalf("loader yielded [%d] %s due %d p %d, model expects %s %s", i, got[i].ID, got[i].DeliverAtMs, got[i].Priority, want[i].ID, fmtModel(want[i]))
		}
		st := StateDelayed
		if want[i].lease {
			st = StateReserved
		}
		if d := viewDiff(got[i], st, want[i]); d != "" {
			h.fatalf("loader yielded %s: %s", got[i].ID, d)
		}
	}
	for _, m := range want {
		h.popped[m.ID] = m.gen
	}
	wantNext := int64(-1)
	for _, m := range rest {
		if wantNext < 0 || m.DeliverAtMs < wantNext {
			wantNext = m.DeliverAtMs
		}
	}
	if next != wantNext || h.l.Len() != len(rest) {
		h.fatalf("loader next due %d with %d loaded, model %d with %d", next, h.l.Len(), wantNext, len(rest))
	}
}

func (md *refModel) histogram() map[string]int {
	out := map[string]int{}
	for _, m := range md.msgs {
		out[m.loc.String()]++
	}
	return out
}
