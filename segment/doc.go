// Package segment owns the on-disk format of one wheel slot second: an
// append-only file named by its absolute Unix second, holding framed and
// checksummed records. It knows bytes and seconds, not topics or messages.
//
// # Why one file per second
//
// A slot second is written while messages are scheduled into it, read
// once when the leader loads it just before it is due, and deleted as a
// whole when the cursor has passed it. One append-only file per second makes
// each of those one sequential operation: appends never rewrite, a load is
// one read, and expiry is one unlink with no compaction. The index (package
// wheel) records where each message's record lies, so a record is read by
// offset without a scan.
//
// # File format
//
// A segment file is a 20-byte header followed by zero or more records. All
// integers are little-endian.
//
//	header (HeaderSize = 20 bytes)
//	  0   4  magic        "DWSG"
//	  4   2  version      FormatVersion (1)
//	  6   2  flags        0, reserved
//	  8   8  second       absolute Unix second the file holds (int64)
//	 16   4  crc          CRC-32C (Castagnoli) of bytes 0..15
//
//	record (FrameHeaderSize = 17 bytes + payload)
//	  0   4  length       payload length in bytes (uint32, ≤ MaxPayload)
//	  4   4  crc          CRC-32C of bytes 8..(17+length), i.e. type, index and payload
//	  8   1  type         TypeMessage (1), TypeTombstone (2) or TypeLease (3)
//	  9   8  index        the Raft log index of the command that wrote the record
//	 17   n  payload      opaque to this package (the wheel encodes messages here)
//
// The file name is the second zero-padded to 12 digits plus ".seg", for
// example 001732245600.seg, so a directory listing sorts by time. A second
// and the second one wheel revolution later have different names, so their
// records never mix; the header's second catches a file found under the
// wrong name. The Raft index in each record is there for inspection and
// checks: readers never de-duplicate by it (see below).
//
// # Crash behaviour
//
// Writers append whole batches with a single write(2), so a crash can only
// leave a suffix of the file missing or partially written. The wheel's
// store does not guess where that suffix starts: every batch it applies
// records each touched file's length in its index, in the same atomic
// write, and on open it cuts every file back to that length
// ([Cache.Truncate]), which ends at a whole record of a whole batch.
// [ReadFileFS] therefore refuses any damage, a torn tail included.
//
// [Scan] handles files without such a record of their length: it stops,
// without an error, at a torn tail (a partial last frame, a bad checksum
// in the last frame, or a tail of zero bytes the file system allocated but
// never wrote) and returns the length of the valid prefix. A bad frame followed by more data is corruption, not a torn tail,
// and is reported as a [*CorruptionError] naming the file and offset; it is
// never skipped silently.
//
// # Handles and durability
//
// [Cache] keeps a bounded LRU of open append handles, so writing to any
// second opens its file lazily and the number of open descriptors stays
// constant whatever the backlog. Files evicted while dirty are closed
// without a sync and remembered, so [Cache.Sync] still covers every write
// since the previous sync: it reopens them to fsync, in parallel, or uses
// one syncfs(2) when many files are dirty.
//
// A file read record by record often enough that reading it whole would
// have cost no more is read whole once, and its records are served from
// memory (image.go): the leases of a second's messages read each of them
// on every replica. A few images of bounded size are kept.
//
// Under Raft the wheel uses [SyncManual]: the Raft log is the durable
// record of every append, and the store syncs the slot files before each
// flush of its index, so the index never records a length the files do not
// hold. After every [Options.WritebackBytes] appended (1 MiB) the cache asks
// the kernel to start writing the open files it appended to, without
// waiting, so that a Sync finds little left to write and the Raft log's
// fsyncs do not queue behind a burst.
package segment
