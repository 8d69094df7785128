package sqlite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// A writer that never stops must not grow the WAL without end: the
// background checkpoint copies it back, finishes on the writer's connection,
// and the WAL starts over — while every committed event stays readable.
func TestWALStartsOverUnderConstantWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agentplane.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "s", UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 3000)})
	// Each commit writes at least three WAL frames (the row's table page,
	// the session's index page, the session's row): 12 KB. Write for 2 s
	// and at least 32 MB of frames, eight times the WAL at which a
	// checkpoint is finished on the writer's connection, so that on a slow
	// machine too the WAL would hold all of it if it never started over.
	const perCommit = 12 << 10
	var commits int
	for start := time.Now(); time.Since(start) < 2*time.Second || commits*perCommit < 32<<20; commits++ {
		if _, err := db.EventsAppend(ctx, []store.EventParams{{SessionID: "s", TS: 1, Type: "t", Payload: payload}}); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	written := int64(commits) * perCommit // a lower bound of what the commits wrote
	if fi.Size() > written/2 {
		t.Fatalf("WAL is %d bytes after %d commits (at least %d bytes of frames): it does not start over", fi.Size(), commits, written)
	}
	// Paged: a fast machine commits more than one page's worth (EventsList
	// caps a page at 10,000).
	read, last := 0, int64(0)
	for {
		evs, err := db.EventsList(ctx, &store.EventsListParams{SessionID: "s", AfterSeq: last, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			if e.Seq != last+1 {
				t.Fatalf("event after seq %d has seq %d", last, e.Seq)
			}
			last = e.Seq
		}
		read += len(evs)
	}
	if read != commits || last != int64(commits) {
		t.Fatalf("%d events (last seq %d) read back after %d commits", read, last, commits)
	}
}
