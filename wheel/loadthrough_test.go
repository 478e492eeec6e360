package wheel

import (
	"maps"
	"math/rand"
	"sync"
	"testing"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The tests of LoadThrough reading slot files without the store's lock:
// the store's loadHook runs before each slot file is read, with no lock
// held, and applies batches "during" the load.

// duringLoad makes the store apply fn's batches while LoadThrough loads
// second, before it reads that second's file; fn runs once. It checks that
// the store's lock is free then.
func (k *storeKit) duringLoad(second int64, fn func()) {
	done := false
	k.s.loadHook = func(sec int64) {
		if sec != second || done {
			return
		}
		done = true
		if !k.s.mu.TryLock() {
			k.t.Fatalf("the store's lock is held while slot second %d loads", sec)
		}
		k.s.mu.Unlock()
		fn()
	}
	k.t.Cleanup(func() {
		if !done {
			k.t.Errorf("slot second %d was never loaded", second)
		}
	})
}

// wantLoaderMatches checks the loader against the store: no load in
// progress, and the messages of its heap and those popped and not yet
// claimed are, together and each once, the live records of the loaded
// slots, each in its slot and, in the heap, as the store holds it.
func (k *storeKit) wantLoaderMatches(l *Loader) {
	k.t.Helper()
	l.mu.Lock()
	items := map[model.ID]item{}
	for id, it := range l.byID {
		items[id] = *it
	}
	heapLen := len(l.h)
	popped := maps.Clone(l.popped)
	loaded, follows, loading := l.loadedThrough, l.follows, len(l.loading)
	l.mu.Unlock()
	if loading != 0 || follows != loaded {
		k.t.Fatalf("loader follows through %d, loaded through %d, %d loads in progress, after LoadThrough", follows, loaded, loading)
	}
	if heapLen != len(items) {
		k.t.Fatalf("heap of %d items, %d by id", heapLen, len(items))
	}
	live := map[model.ID]int64{}
	for sec := k.s.Cursor(); sec <= loaded; sec++ {
		info, err := k.s.Slot(SlotOf(sec), true)
		if err != nil {
			k.t.Fatal(err)
		}
		for _, r := range info.Records {
			if r.Live {
				live[r.ID] = sec
			}
		}
	}
	for id, it := range items {
		sec, ok := live[id]
		if !ok || sec != it.second {
			k.t.Fatalf("loader holds %s in second %d; the store has it live in the loaded slots: %v, in second %d", id, it.second, ok, sec)
		}
		if _, ok := popped[id]; ok {
			k.t.Fatalf("message %s is both in the heap and popped", id)
		}
		v := k.get(id)
		if m := it.msg; m.DeliverAtMs != v.DeliverAtMs || m.Receipt != v.Receipt || m.Attempts != v.Attempts || m.Priority != v.Priority {
			k.t.Fatalf("loader holds %s due %d receipt %d attempts %d priority %d; store: due %d receipt %d attempts %d priority %d",
				id, m.DeliverAtMs, m.Receipt, m.Attempts, m.Priority, v.DeliverAtMs, v.Receipt, v.Attempts, v.Priority)
		}
	}
	for id, sec := range popped {
		if s, ok := live[id]; !ok || s != sec {
			k.t.Fatalf("message %s popped from second %d is claimable; the store has it live: %v, in second %d", id, sec, ok, s)
		}
	}
	if len(items)+len(popped) != len(live) {
		for id, sec := range live {
			if _, ok := items[id]; !ok {
				if _, ok := popped[id]; !ok {
					k.t.Fatalf("message %s live in second %d is not in the loader", id, sec)
				}
			}
		}
	}
}

// loadChecked loads through second, checks that the files' records added
// n messages and that the loader then matches the store.
func (k *storeKit) loadChecked(l *Loader, second int64, n int) {
	k.t.Helper()
	if got := k.load(second); got != n {
		k.t.Fatalf("loaded %d messages from the files through second %d, want %d", got, second, n)
	}
	k.wantLoaderMatches(l)
}

// popAll pops every loaded message and returns them by id.
func popAll(l *Loader) map[model.ID]model.Message {
	due, _ := l.PopDue(MaxDueMs)
	out := map[model.ID]model.Message{}
	for _, m := range due {
		out[m.ID] = m
	}
	return out
}

// Batches apply while a slot file is read: a record appended to the file
// after the snapshot arrives once, as an event; a cancel and a reschedule
// inside the slot apply after the file's records.
func TestLoadThroughAppliesDuringLoad(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	a := t0s + 1
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100}, // cancelled during the load
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200}, // rescheduled inside the slot during the load
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1300},
	)
	var added model.ID
	k.duringLoad(a, func() {
		added = k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1400})[0].ID
		k.one(command.Cancel{ID: enq[0].ID})
		k.one(command.Reschedule{ID: enq[1].ID, DeliverAtMs: t0 + 1050})
		if l.Len() != 0 {
			t.Fatalf("%d loaded before the slot's file was read", l.Len())
		}
	})
	k.loadChecked(l, a, 3)
	due, _ := l.PopDue(t0 + 2000)
	want := []struct {
		id  model.ID
		due int64
	}{{enq[1].ID, t0 + 1050}, {enq[2].ID, t0 + 1300}, {added, t0 + 1400}}
	if len(due) != len(want) {
		t.Fatalf("popped %d messages, want %d", len(due), len(want))
	}
	for i, w := range want {
		if due[i].ID != w.id || due[i].DeliverAtMs != w.due {
			t.Fatalf("popped [%d] %s due %d, want %s due %d", i, due[i].ID, due[i].DeliverAtMs, w.id, w.due)
		}
	}
}

// A message of a loading slot's snapshot moved to a loaded slot after the
// snapshot: the file's copy must not replace the one the loaded slot
// holds, which the removal from the loading slot would then delete. Moved
// there and back, it is loaded as the loading slot's newest record.
func TestLoadThroughMessageMovedToLoadedSlot(t *testing.T) {
	for _, moves := range [][]int64{{t0 + 1500}, {t0 + 1500, t0 + 2700}} {
		k, l, _ := newLoaderKit(t)
		b, a := t0s+1, t0s+2
		k.load(b)
		m := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2500})[0].ID
		k.duringLoad(a, func() {
			for _, due := range moves {
				k.one(command.Reschedule{ID: m, DeliverAtMs: due})
			}
		})
		k.load(a)
		k.wantLoaderMatches(l)
		want := moves[len(moves)-1]
		if got := popAll(l); len(got) != 1 || got[m].DeliverAtMs != want {
			t.Fatalf("moved to %v: loaded %v, want %s due %d alone", moves, got, m, want)
		}
	}
}

// Messages moved between two slots loading in the same LoadThrough, either
// way, end up once, in the slot they moved to.
func TestLoadThroughMessageMovedBetweenLoadingSlots(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	a, c := t0s+1, t0s+2
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2500}, // moves from c to a
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500}, // moves from a to c
	)
	k.duringLoad(a, func() {
		k.one(command.Reschedule{ID: enq[0].ID, DeliverAtMs: t0 + 1300})
		k.one(command.Reschedule{ID: enq[1].ID, DeliverAtMs: t0 + 2300})
	})
	k.load(c)
	k.wantLoaderMatches(l)
	got := popAll(l)
	if len(got) != 2 || got[enq[0].ID].DeliverAtMs != t0+1300 || got[enq[1].ID].DeliverAtMs != t0+2300 {
		t.Fatalf("loaded %v", got)
	}
}

// What a placement into a loading slot does to the popped messages takes
// effect at once: a popped copy is stale from the batch on, not from the
// merge.
func TestLoadThroughPlacementUnclaimsAtOnce(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	b, a := t0s+1, t0s+2
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100}, // popped, then moved to the loading slot
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200}, // popped, then placed into it by an event alone
	)
	k.load(b)
	if due, _ := l.PopDue(t0 + 1200); len(due) != 2 {
		t.Fatalf("popped %d", len(due))
	}
	k.duringLoad(a, func() {
		k.one(command.Reschedule{ID: enq[0].ID, DeliverAtMs: t0 + 2200})
		// The heap part of this placement waits for the merge, its popped
		// part must not.
		m := model.Message{ID: enq[1].ID, Topic: "a", DeliverAtMs: t0 + 2100}
		l.applied([]Event{{Kind: EventPlaced, Second: a, ID: m.ID, Msg: &m}})
		for i, e := range enq {
			if l.Claim(e.ID) {
				t.Errorf("message %d placed into the loading slot is still claimable", i)
			}
		}
		if l.Len() != 0 {
			t.Errorf("%d in the heap before the slot merged", l.Len())
		}
	})
	k.load(a)
	got := popAll(l)
	if len(got) != 2 || got[enq[0].ID].DeliverAtMs != t0+2200 || got[enq[1].ID].DeliverAtMs != t0+2100 {
		t.Fatalf("loaded %v", got)
	}
}

// A slot that expires while it loads is dropped, whether its file is
// still there or already deleted; the slots after it load.
func TestLoadThroughSlotExpiresWhileLoading(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		k, l, _ := newLoaderKit(t)
		a, c := t0s+1, t0s+2
		k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100}, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200})
		kept := k.schedule(t0, command.NewMessage{Topic: "c", DeliverAtMs: t0 + 2100})[0].ID
		k.duringLoad(a, func() {
			k.apply(command.Expire{Before: a + 1})
			if deleted {
				if _, err := k.s.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			if k.fileExists(a) == deleted {
				t.Fatalf("slot file there after the expiry: %v; synced: %v", !deleted, deleted)
			}
		})
		k.loadChecked(l, c, 1)
		if got := popAll(l); len(got) != 1 || got[kept].ID != kept {
			t.Fatalf("file deleted %v: loaded %v", deleted, got)
		}
		if got := l.TakeReadyTopics(); len(got) != 1 || got[0] != "a" {
			t.Fatalf("ready topics %v", got)
		}
	}
}

// A message becoming ready while a slot loads is heard of at once.
func TestLoadThroughReadyAtOnce(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	a := t0s + 1
	k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100})
	k.duringLoad(a, func() {
		changed := l.Changed()
		k.schedule(t0, command.NewMessage{Topic: "now", DeliverAtMs: t0 - 5})
		select {
		case <-changed:
		default:
			t.Error("a ready message did not wake the loader during the load")
		}
		if got := l.TakeReadyTopics(); len(got) != 1 || got[0] != "now" {
			t.Errorf("ready topics during the load %v", got)
		}
	})
	k.load(a)
	k.wantLoaderMatches(l)
}

// A slot file that cannot be read fails LoadThrough and ends the loads in
// progress, with what they held back: the next LoadThrough loads those
// slots afresh.
func TestLoadThroughFailureEndsLoads(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	a, c := t0s+1, t0s+2
	k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100}, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2100})
	f, err := k.fs.OpenReadWrite(k.segPath(a))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var orig [1]byte
	off := int64(segment.HeaderSize + 20) // inside the first record's payload
	if _, err := f.ReadAt(orig[:], off); err != nil {
		t.Fatal(err)
	}
	k.duringLoad(a, func() {
		k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200}, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2200})
		if _, err := f.WriteAt([]byte{orig[0] ^ 0xff}, off); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := k.s.LoadThrough(c); err == nil {
		t.Fatal("LoadThrough read a corrupt slot file")
	}
	if got := l.followsThrough(); got != a-1 {
		t.Fatalf("after the failure the loader follows through %d, want %d", got, a-1)
	}
	if l.Len() != 0 {
		t.Fatalf("%d loaded after the failure", l.Len())
	}
	k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1300})
	if _, err := f.WriteAt(orig[:], off); err != nil {
		t.Fatal(err)
	}
	k.loadChecked(l, c, 5)
}

// A loader attached anew while it loads drops the loads in progress, and
// what it held: it follows the store afresh from the cursor.
func TestLoadThroughReattachDropsLoads(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	a, c := t0s+1, t0s+2
	k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 500}, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100}, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2100})
	k.load(t0s)
	if due, _ := l.PopDue(t0 + 500); len(due) != 1 {
		t.Fatalf("popped %d", len(due))
	}
	k.duringLoad(a, func() {
		k.s.AttachLoader(l)
		if l.Len() != 0 || l.followsThrough() != t0s-1 {
			t.Fatalf("attached anew: %d loaded, follows through %d", l.Len(), l.followsThrough())
		}
	})
	k.loadChecked(l, c, 0)
	k.loadChecked(l, c, 3)
}

// Batches of random changes applied while each slot loads, some slots
// loaded and some popped before: the loader ends up holding what the
// store holds.
func TestLoadThroughRandomChangesDuringLoad(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	rng := rand.New(rand.NewSource(7))
	var ids []model.ID
	leased := map[model.ID]uint64{}
	nonce := uint64(0)
	cursor := t0s
	now := func() int64 { return cursor * TickMs }
	// A random change to the slots around the cursor, loaded, loading or
	// not followed yet, or past the horizon of the test.
	change := func() {
		due := now() + rng.Int63n(7*TickMs)
		switch r := rng.Intn(10); {
		case r < 3 || len(ids) == 0:
			msgs := make([]command.NewMessage, 1+rng.Intn(3))
			for i := range msgs {
				msgs[i] = command.NewMessage{Topic: "a", DeliverAtMs: now() + rng.Int63n(7*TickMs), Priority: int64(rng.Intn(3)), MaxAttempts: 3}
			}
			for _, e := range k.schedule(now(), msgs...) {
				ids = append(ids, e.ID)
			}
		case r < 6:
			k.apply(command.Reschedule{ID: ids[rng.Intn(len(ids))], DeliverAtMs: due})
		case r < 7:
			k.apply(command.Cancel{ID: ids[rng.Intn(len(ids))]})
		case r < 9:
			id := ids[rng.Intn(len(ids))]
			nonce++
			res := k.apply(command.Lease{NowMs: now(), Items: []command.LeaseItem{{ID: id, Nonce: nonce, ExpiresMs: due, RedeliverMs: due}}})
			if ok, _ := res[0].Value.([]bool); len(ok) == 1 && ok[0] {
				leased[id] = nonce
			}
		default:
			for id, n := range leased {
				k.apply(command.Ack{NowMs: now(), Receipts: []model.Receipt{{ID: id, Nonce: n}}})
				delete(leased, id)
				break
			}
		}
	}
	for round := 0; round < 300; round++ {
		for i := rng.Intn(5); i > 0; i-- {
			change()
		}
		// Some of the loaded messages popped. None is claimed: a claimed
		// message lives on in its slot without the loader.
		l.PopDue(now() + rng.Int63n(2*TickMs))
		k.s.loadHook = func(int64) {
			for i := rng.Intn(4); i > 0; i-- {
				change()
			}
			switch rng.Intn(12) {
			case 0: // the cursor passes slots loaded and loading
				cursor++
				k.apply(command.Expire{Before: cursor})
			case 1: // and their files go
				cursor++
				k.apply(command.Expire{Before: cursor})
				if _, err := k.s.Sync(); err != nil {
					t.Fatal(err)
				}
			case 2:
				l.PopDue(now() + rng.Int63n(2*TickMs))
			}
		}
		k.load(cursor + int64(rng.Intn(4)))
		k.s.loadHook = nil
		k.wantLoaderMatches(l)
		if rng.Intn(3) == 0 {
			cursor++
			k.apply(command.Expire{Before: cursor})
		}
	}
}

// LoadThrough may be called concurrently with itself and with Apply: the
// loader ends up holding what the store holds.
func TestLoadThroughConcurrent(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	for i := 0; i < 20; i++ {
		msgs := make([]command.NewMessage, 50)
		for j := range msgs {
			msgs[j] = command.NewMessage{Topic: "a", DeliverAtMs: t0 + int64((i*50+j)*7%6000)}
		}
		k.schedule(t0, msgs...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sec := t0s; sec <= t0s+6; sec++ {
				if _, err := k.s.LoadThrough(sec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Applied by this goroutine while the loads run.
	for i := 0; i < 100; i++ {
		k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + int64(i*61%6000)})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	k.wantLoaderMatches(l)
}
