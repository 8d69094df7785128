package sqlite

import (
	"context"
	"database/sql"
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
// over (issue 13). So once a pass has found the WAL long, a second pass
// copies what was committed during the first, and a last one, on the
// writer's own connection, copies the few frames committed since: nothing
// can commit between that pass and the writer's next transaction, which
// then starts the WAL over. Readers holding an older snapshot make that
// wait for a later pass.
//
// The last pass holds the writer off while it runs (it copies, and syncs
// the WAL and the database file). It runs from here rather than on the
// writer's goroutine before its next transaction: that way it takes the
// connection as soon as a commit releases it, while the next batch is
// still gathering, instead of after the batch gathered, when the stall
// adds to every event in it. And the second pass keeps it short: copying
// all that the first pass left behind made the writer wait 1.4–19 ms
// (mean 8) four times a second at 200 streams, a good part of the
// delivery p99 (issue 13; BENCHMARKS.md).
type checkpointer struct {
	read, write *sql.DB
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
				c.pass(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// pass copies the WAL back, and when it was long, has the writer's next
// transaction start it over.
func (c *checkpointer) pass(ctx context.Context) {
	if frames, err := passive(ctx, c.read); err != nil || frames < restartFrames {
		return
	}
	if _, err := passive(ctx, c.read); err != nil {
		return
	}
	_, _ = passive(ctx, c.write)
}

// passive runs a PASSIVE checkpoint on one of db's connections and reports
// the WAL's length in frames.
func passive(ctx context.Context, db *sql.DB) (frames int64, err error) {
	var busy, copied int64
	err = db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	return frames, err
}
