package wheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The store's side of the loader: attaching one, and LoadThrough, which
// reads the slot files up to a second into it without holding the store's
// lock while it reads, so that Apply runs meanwhile and the loader follows
// what it changes.

// AttachLoader makes l follow this store, with no slot loaded: from now on
// records placed into or removed from the slots it loads reach it. The
// leader attaches one; followers have none. It replaces any loader
// attached before. Loads of l in progress are dropped.
func (s *Store) AttachLoader(l *Loader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.reset(s.cursor - 1)
	s.observer = l
}

// DetachLoader stops feeding the attached loader.
func (s *Store) DetachLoader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = nil
}

// LoadThrough loads every slot up to and including second into the attached
// loader and returns how many messages it added. Loading a slot reads its
// file once; later changes arrive as events.
//
// The store's lock is not held while a slot file is read for the loader:
// reading and decoding a slot of many messages takes milliseconds, during
// which no batch could apply, and the hand-offs and acks of the messages
// due meanwhile would wait. Under the lock LoadThrough only takes a
// snapshot (snapshotLoads): the length of each slot file to load that the
// index covers, and it makes the loader follow those seconds, still
// loading, so that every batch applied from then on reports what it
// places into or removes from them. Then, without the lock, it reads each
// file's first length bytes and decodes their live records (readLoad).
// Slot files are append-only: what batches append meanwhile lies past
// length, and reaches the loader as events, which it holds back for a
// loading slot and applies after the file's records when it merges them
// (Loader.merge), a second at a time, in order. A rollback (Open) cuts
// only bytes past the length the index covers. A file may be deleted
// meanwhile once the cursor passes its second (Expire): the loader has
// dropped that load when it heard of the expiry, and the missing file is
// no error. The store never reads the loader, and LoadThrough writes
// nothing: a store with a loader applies exactly as one without.
//
// One LoadThrough runs at a time; a concurrent call waits for the first.
func (s *Store) LoadThrough(second int64) (int, error) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	l, loads, err := s.snapshotLoads(second)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ld := range loads {
		if s.loadHook != nil {
			s.loadHook(ld.second)
		}
		msgs, err := s.readLoad(ld)
		if err != nil {
			if err := s.loadFailed(l, ld, err); err != nil {
				return n, err
			}
		}
		n += l.merge(ld, msgs)
	}
	return n, nil
}

// snapshotLoads is the part of LoadThrough under the store's lock: it
// returns the attached loader and the slots to load through second, from
// the first second the loader does not follow (the cursor's at the
// latest) to the horizon's last at most, each with the length of its file
// that the index covers, and makes the loader follow them as loading.
func (s *Store) snapshotLoads(second int64) (*Loader, []*slotLoad, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return nil, nil, err
	}
	l, ok := s.observer.(*Loader)
	if !ok {
		return nil, nil, errors.New("load slots: no loader attached")
	}
	from := max(l.followsThrough()+1, s.cursor)
	second = min(second, s.cursor+HorizonSecs-1)
	if second < from {
		return l, nil, nil
	}
	loads := make([]*slotLoad, second-from+1)
	for i := range loads {
		loads[i] = &slotLoad{second: from + int64(i)}
	}
	// One scan of the index for the slots with a file.
	err := s.scanRange(segLenKey(from), segLenKey(second+1), func(k, v []byte) error {
		sec := int64(binary.BigEndian.Uint64(k[1:]))
		// A file without live records (all tombstoned) is not read.
		if sl := decodeSegLen(v); sl.Live > 0 {
			ld := loads[sec-from]
			ld.path, ld.length = s.segs.Path(sec), sl.Length
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	l.startLoading(loads)
	return l, loads, nil
}

// readLoad reads the messages of ld's slot file as the snapshot found it,
// without the store's lock.
func (s *Store) readLoad(ld *slotLoad) ([]model.Message, error) {
	if ld.length == 0 {
		return nil, nil
	}
	live, err := liveRecords(s.fs, ld.path, ld.length)
	if err != nil {
		return nil, err
	}
	return decodeLive(ld.second, live)
}

// loadFailed decides, under the store's lock, what a failed read of ld's
// slot file means. A file deleted because its slot expired (the cursor is
// past it) is no error: the loader has dropped the load, since a file goes
// only in or after the commit of its expiry, which tells the loader before
// it lets go of the lock taken here. Any other failure ends the loads in
// progress, so that the next LoadThrough takes them up afresh, and is
// returned.
func (s *Store) loadFailed(l *Loader, ld *slotLoad, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, iofs.ErrNotExist) && s.cursor > ld.second {
		return nil
	}
	l.abandon()
	if cerr := s.checkOpen(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("load slot second %d: %w", ld.second, err)
}

// liveCommitted returns the live records of the committed slot file of sec
// (none when the index records no file there). s.mu is held.
func (s *Store) liveCommitted(sec int64) ([]segment.Entry, error) {
	v, err := s.get(segLenKey(sec))
	if err != nil || v == nil {
		return nil, err
	}
	return liveRecords(s.fs, s.segs.Path(sec), decodeSegLen(v).Length)
}

// liveRecords returns the live records of the first length bytes of the
// slot file path, what the index covered when length was read from it. It
// needs no lock: see LoadThrough.
func liveRecords(fs vfs.FS, path string, length int64) ([]segment.Entry, error) {
	entries, err := segment.ReadPrefixFS(fs, path, length)
	if err != nil {
		return nil, err
	}
	return liveEntries(entries), nil
}

// decodeLive decodes the live records of the slot file of sec: messages,
// and leases, which come due when they end (for a redelivery, or, out of
// attempts, for the dead letters).
func decodeLive(sec int64, live []segment.Entry) ([]model.Message, error) {
	out := make([]model.Message, 0, len(live))
	intern := map[string]string{}
	for _, e := range live {
		m, err := decodeMessage(e.Payload, intern)
		if err != nil {
			return nil, fmt.Errorf("slot second %d offset %d: %w", sec, e.Offset, err)
		}
		out = append(out, m)
	}
	return out, nil
}
