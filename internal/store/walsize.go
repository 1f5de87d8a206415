package store

import (
	"context"
	"errors"
	"os"
)

// Why the WAL is grown to its full size at open:
//
// Every commit appends its frames to the WAL and, with synchronous=FULL,
// fsyncs it. While the file grows, each of those fsyncs also commits the
// new size and the newly allocated blocks through the file system's
// journal; once a checkpoint has reset the WAL, SQLite writes it from its
// start again, over blocks that already hold data, and the fsync flushes
// the data alone. On the 2-core guest an append after 1 ms of quiet (an
// exec's intent) took about 300 us in a new WAL and 217 us once the WAL
// had wrapped (docs/performance.md). A daemon starts with no WAL (SQLite
// deletes it when the last connection closes), so without help every start
// pays the expensive kind for its first thousand commits. Preallocating
// with fallocate does not help: its unwritten extents are converted, in
// the journal, when first written. The blocks have to be written.

// walFrameHeader and walFileHeader are the sizes of SQLite's WAL frame and
// file headers (https://www.sqlite.org/fileformat.html, "WAL File Format").
const (
	walFileHeader  = 32
	walFrameHeader = 24
)

// walFrames is how many frames the WAL is sized for: the pages SQLite's
// automatic checkpoint lets it hold (wal_autocheckpoint, 1000 by default,
// which the store keeps) plus room for the batch that crosses that mark.
const walFrames = 1000 + 64

// presizeWAL grows the WAL, with zeros, to the size it reaches between
// checkpoints, when it is smaller. It runs inside a write transaction
// (BEGIN IMMEDIATE, which in WAL mode holds SQLite's WAL write lock), so
// no connection, in this process or another, appends frames while the
// file grows; and it only adds bytes past the file's end, past every valid
// frame. SQLite reads frames only up to the first invalid one (zeros
// match neither the header's salt nor a checksum, as the stale frames
// past the end of a reset WAL do not), writes its header over the start
// of an empty WAL at its first commit, and keeps the file's size when it
// resets it (journal_size_limit is left at -1).
//
// This cannot be done before SQLite opens the file: SQLite deletes a WAL
// it finds beside an empty database, so a new database would lose it.
func (s *Store) presizeWAL(ctx context.Context) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var page int64
	if err := tx.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&page); err != nil {
		return err
	}
	// SQLite's file: opened without O_CREATE, and never cut below the
	// size it had.
	f, err := os.OpenFile(s.path+"-wal", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	have, want := fi.Size(), walFileHeader+walFrames*(page+walFrameHeader)
	if have >= want {
		return nil
	}
	// The last free space is the audit log's: a WAL grown into it would
	// only bring ErrStorageFull sooner.
	free, err := s.FreeBytes()
	if err != nil {
		return err
	}
	if free < presizeFreeFactor*(want-have) {
		return nil
	}
	zeros := make([]byte, 256<<10)
	for off := have; off < want; {
		n, err := f.WriteAt(zeros[:min(want-off, int64(len(zeros)))], off)
		if err != nil {
			// Give back what was taken: only zeros past every frame.
			return errors.Join(err, f.Truncate(have))
		}
		off += int64(n)
	}
	return f.Sync()
}

// presizeFreeFactor: the WAL is grown only while the file system has this
// many times the growth free.
const presizeFreeFactor = 16
