package wheel

import (
	"github.com/cockroachdb/pebble/vfs"
)

// CrashForTest simulates a power loss under the store: it closes the store
// without syncing and drops every write fs had not synced. fs must be the
// strict in-memory file system the store was opened on.
func (s *Store) CrashForTest(fs *vfs.MemFS) {
	fs.SetIgnoreSyncs(true)
	s.mu.Lock()
	if s.segs != nil {
		s.segs.Close()
		s.segs = nil
	}
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
	s.broken = ErrClosed
	s.mu.Unlock()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
}
