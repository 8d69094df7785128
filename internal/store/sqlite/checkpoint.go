package sqlite

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
)

// checkpointEvery paces the background WAL checkpoint.
const checkpointEvery = 250 * time.Millisecond

// restartFrames is the WAL length (frames of one page, 4 KiB) past which
// the writer finishes a checkpoint so that the WAL starts over: SQLite's
// own autocheckpoint threshold.
const restartFrames = 1000

// checkpointer keeps the WAL short. A PASSIVE checkpoint copies the WAL
// back into the database file without waiting for, or blocking, the
// writer; the background one does most of that work on a reader
// connection. But SQLite starts the WAL over only when a write
// transaction begins on a WAL that is copied back entirely, and a writer
// that commits all the time never leaves it so: each background pass ends
// behind the frames committed while it ran. Then the WAL grows without
// end (1 GB in 12 s of tool calls), and every commit appends to a growing
// file — new blocks, and an fsync that must journal the file's new size:
// a sequential tool call cost a quarter more than with the WAL starting
// over (issue 13). So once a background pass has found the WAL long, the
// writer itself, before its next transaction, copies the frames that pass
// left behind: a short checkpoint, after which that transaction starts
// the WAL over. (Before the next transaction rather than after the last
// commit: the events just committed are not held back from delivery.)
// Readers holding an older snapshot make that wait for a later pass.
type checkpointer struct {
	read *sql.DB
	// due: a background pass found the WAL past restartFrames; the
	// writer finishes the checkpoint before its next transaction.
	due atomic.Bool
}

// start runs the background checkpoint; it returns its stop function.
func (c *checkpointer) start() func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if frames, err := passive(ctx, c.read); err == nil && frames >= restartFrames {
					c.due.Store(true)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// beforeWrite is the writer's side (sqlstore.DB.BeforeWrite).
func (c *checkpointer) beforeWrite(ctx context.Context, write *sql.DB) {
	if c.due.CompareAndSwap(true, false) {
		_, _ = passive(context.WithoutCancel(ctx), write)
	}
}

// passive runs a PASSIVE checkpoint on one of db's connections and reports
// the WAL's length in frames.
func passive(ctx context.Context, db *sql.DB) (frames int64, err error) {
	var busy, copied int64
	err = db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	return frames, err
}
