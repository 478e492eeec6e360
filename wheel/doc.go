// Package wheel owns the replicated state of delaywheel and the machine
// that changes it: the file-backed timing wheel, its Pebble index and the
// store that applies the commands of the log (their types and encoding are
// package wheel/command's; the ids, messages, members and errors every
// layer shares are package wheel/model's). It also owns the leader's loader, which follows the store to hand
// out messages at their due millisecond. It knows nothing of Raft, HTTP or
// the network: replication feeds it commands in log order and serves reads
// from it.
//
// # The wheel
//
// Time is cut into one-second slots, Slots of them: a two-hour horizon
// ahead of the cursor, the second being fired. A message due within the
// horizon is a record in the slot file of its due second; one due later
// waits in the overflow, in the index, until Promote moves it into the
// wheel as the horizon reaches it. Expire fires every slot before a
// second: the live records of its file move to their topics' ready queues
// (a lease that ran out of attempts, to the dead letters), the cursor moves
// on, and the file is deleted once that is durable. A lease writes the
// message's redelivery into the slot of its deadline, so an expired lease
// comes back by the same path as a due message.
//
// # Recurring schedules
//
// A schedule (schedule.go) is stored by name, as set, with where it stands
// (last and next occurrence, occurrences fired) stored apart, so that an
// advance rewrites a few bytes and not the body the occurrences carry; it
// is indexed by its next occurrence. Its calendar (recurring.go) is a cron
// expression in a time zone, parsed by github.com/robfig/cron/v3 with
// corrections for daylight saving, or a fixed interval from a start.
// AdvanceSchedules, which the leader proposes ahead of the occurrences'
// times, enqueues each occurrence as an ordinary message keyed by it and
// computes the next one from the previous and the instants the leader
// stamped, never from a clock. Invariant: a live leader skips no
// occurrence. One due since the leader's SinceMs is its own, and however
// late the leader advances it, the next is the one after it; only one due
// before SinceMs, which passed while no leader advanced schedules, is
// followed by the first occurrence after the leader's NowMs, so an outage
// costs one late occurrence, not a burst.
//
// # Slot files and the index
//
// A slot file is an append-only log of message, lease and tombstone
// records (package segment); the last record of an id, unless a tombstone,
// is live. The index records each file's length, and Open cuts anything a
// crash left past it, so the files never hold more than the index covers.
// Pebble holds the rest (keys.go): each message's meta (state and place),
// the overflow and its counts by the hour its messages are due
// (overflowhours.go), the ready queues, the dead letters, keys, counts,
// topics, nodes and the scalars. A message enqueued without a key, into a
// slot file or the overflow, has no meta of its own until it changes: its
// entry's placements stand for it (placed.go). A queue's head is read from a
// floor kept in memory, not from the start of its range, which holds what
// consumers deleted from it since the last compaction (readyfloor.go); the
// leader's look for due schedules likewise starts at a floor, past the
// occurrences advanced before it (schedule.go). The index records its
// layout's format; a store opens that format only.
//
// # Message ids
//
// A message's id is the Raft index of the entry that enqueued it and its
// Seq: its position in the entry, below MaxEntryMessages, under the store's
// group (Options.Group) in the top byte, so that an id names the Raft
// group that holds it (ID.Group) and a topic's group is GroupOf. A store
// of group 0 mints the ids a cluster without groups always did.
//
// # Applying
//
// Apply is deterministic: its result and the state it writes depend on the
// commands and the stored state alone, never on the clock (time arrives
// inside commands), on the batching of entries, or on anything a node holds
// in memory besides. Every node therefore reaches the same state at the
// same applied index, which Dump writes in a form replicas can compare.
// One Apply is one batch (batch.go, committed by commit.go): records are
// buffered per slot file and written before the index batch commits, and entries at or below the
// applied index are skipped, so a crash at any instant followed by a replay
// of the log converges to the same state. Command handlers are in
// apply.go, where a message goes in placement.go, its meta in metaread.go;
// each calls down that list into batch.go's primitives. The metas that committed
// batches wrote are kept decoded in a bounded cache (metacache.go), so the
// lease that follows an enqueue and the ack that follows a lease read no
// index: it holds exactly what the index holds for those messages, so it
// changes where a batch reads from, never what it reads. The schedules
// they wrote are kept the same way (schedulecache.go), so that a
// schedule's next advance reads no index either. A Schedule of many keyed
// messages looks their keys up with one index iterator, not a point read
// each (tx.keysHeld).
//
// # The loader
//
// On the leader a Loader holds the messages of the slots about to fire in
// a heap ordered by due millisecond, priority and id, so the dispatcher
// can hand each out at its due millisecond without reading the files. It
// loads a slot once (LoadThrough) and then follows the store: each
// committed batch publishes what it placed in or removed from the loaded
// slots, moved to a ready queue or expired. The loader decides what to
// keep; the store never reads it, so a store with a loader applies exactly
// as one without. The store's lock is not held while a slot file is read
// for the loader: LoadThrough notes under it how much of each file the
// index covers, reads that much without it while batches apply, and the
// loader holds back what those batches do to a slot until the slot's
// records are in (loader.go).
package wheel
