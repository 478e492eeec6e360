// Package segment owns the on-disk format of one wheel slot second: an
// append-only file named by its absolute Unix second, holding framed and
// checksummed records. It knows bytes and seconds, not topics or messages.
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
// example 001732245600.seg, so a directory listing sorts by time.
//
// # Crash behaviour
//
// Writers append whole batches with a single write(2), so a crash can only
// leave a suffix of the file missing or partially written. [Repair] scans a
// file and truncates a torn tail: a partial last frame, a bad checksum in the
// last frame, or a tail of zero bytes (space the file system allocated but
// never wrote). A bad frame followed by more data is corruption, not a torn
// tail, and is reported as a [*CorruptionError] naming the file and offset;
// it is never skipped silently.
//
// # Handles
//
// [Cache] keeps a bounded LRU of open append handles, so writing to any
// second opens its file lazily and the number of open descriptors stays
// constant whatever the backlog. Files evicted while dirty are closed without
// a sync and remembered, so [Cache.Sync] still covers every write since the
// previous sync: it reopens them to fsync. After every
// [Options.WritebackBytes] appended (1 MiB) it asks the kernel to start
// writing the open files it appended to, without waiting, so that a Sync
// finds little left to write and the Raft log's fsyncs do not queue behind
// a burst.
package segment
