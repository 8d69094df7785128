package run

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

func contentBytes(msgs []string) int {
	n := 0
	for _, m := range msgs {
		n += len(m)
	}
	return n
}

// transcriptStore opens the dialect's store with an event log on it, and
// returns a function that makes a session of user "u" created at a time.
func transcriptStore(t testing.TB, dialect string) (store.Store, *eventlog.Log, func(sid string, createdAt int64)) {
	st := testdb.Open(t, dialect)
	log := eventlog.New(st, eventlog.Options{})
	t.Cleanup(log.Stop)
	return st, log, func(sid string, createdAt int64) {
		t.Helper()
		if _, err := st.SessionCreate(context.Background(), &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: createdAt}); err != nil {
			t.Fatal(err)
		}
	}
}

// transcriptReads is what m's agentplane_transcript_reads_total says: its
// transcripts from memory and read whole.
func transcriptReads(t *testing.T, m *Manager) (memory, readWhole int) {
	t.Helper()
	var b bytes.Buffer
	if err := m.opts.Metrics.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct {
		name string
		n    *int
	}{{"memory", &memory}, {"store", &readWhole}} {
		if m := regexp.MustCompile(`(?m)^agentplane_transcript_reads_total\{source="` + src.name + `"\} (\d+)$`).FindStringSubmatch(b.String()); m != nil {
			*src.n, _ = strconv.Atoi(m[1])
		}
	}
	return memory, readWhole
}

// The transcript sent to an agent keeps the newest messages that fit in
// its byte bound; the first that does not fit is cut with a marker, so one
// message over the bound never empties it.
func TestTranscriptIsBoundedNewestFirst(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st, log, createSession := transcriptStore(t, dialect)
		ctx := context.Background()
		session := func(contents ...string) string {
			sid := ids.New("ses")
			createSession(sid, 1)
			for i, c := range contents {
				if _, err := st.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, Role: "user", Content: c, CreatedAt: int64(i + 1)}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond) // ids order by time
			}
			return sid
		}
		load := func(m *Manager, sid string) []string {
			msgs, err := m.loadTranscript(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]string, len(msgs))
			for i, msg := range msgs {
				out[i] = msg.Content
			}
			return out
		}
		m := New(log, Options{MaxTranscriptBytes: 4096, TranscriptLimit: 200})
		a, b, c := strings.Repeat("a", 3000), strings.Repeat("b", 1500), strings.Repeat("é", 1000)

		// Older messages beyond the bound are dropped; the one across it is cut.
		got := load(m, session("first", a, b, "newest"))
		if len(got) != 3 || got[1] != b || got[2] != "newest" || !strings.HasPrefix(got[0], "aaa") || !strings.Contains(got[0], "truncated by agentplane") || contentBytes(got) > 4096 {
			t.Fatalf("transcript %d messages, %d bytes: %.80q…", len(got), contentBytes(got), got)
		}
		// One message larger than the bound is cut, not dropped (valid UTF-8).
		got = load(m, session(a, strings.Repeat(c, 10)))
		if len(got) != 1 || !utf8.ValidString(got[0]) || !strings.HasSuffix(got[0], fmt.Sprintf(" of %d bytes shown]", 20000)) || len(got[0]) > 4096 || len(got[0]) < 3900 {
			t.Fatalf("one big message: %d messages, %d bytes", len(got), contentBytes(got))
		}
		// Too little room left for a useful cut: the older message is dropped.
		got = load(m, session(b, strings.Repeat("x", 4000)))
		if len(got) != 1 || got[0] != strings.Repeat("x", 4000) {
			t.Fatalf("tiny room: %d messages, %d bytes", len(got), contentBytes(got))
		}
		// Many small messages: the count limit holds across pages, order kept.
		var many []string
		for i := range 50 {
			many = append(many, fmt.Sprintf("m%02d", i))
		}
		m = New(log, Options{MaxTranscriptBytes: 4096, TranscriptLimit: 30})
		got = load(m, session(many...))
		if fmt.Sprint(got) != fmt.Sprint(many[20:]) {
			t.Fatalf("many: %v", got)
		}
		m = New(log, Options{MaxTranscriptBytes: 4096, TranscriptLimit: 200})
		if got = load(m, session(many...)); fmt.Sprint(got) != fmt.Sprint(many) {
			t.Fatalf("all: %v", got)
		}
	})
}

// A session's transcript read from this process's copy and the messages
// added since is the transcript read whole, whatever is added between two
// runs: root and child turns, messages of any size, and messages that
// commit after a newer one (an id older than the copy's newest), which only
// the session's version reveals.
func TestTranscriptCacheMatchesTheStore(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st, log, createSession := transcriptStore(t, dialect)
		ctx := context.Background()
		opts := Options{MaxTranscriptBytes: 4096, TranscriptLimit: 12}
		cached := New(log, opts)
		opts.TranscriptCacheBytes = -1
		whole := New(log, opts)
		sid := ids.New("ses")
		createSession(sid, 1)
		rnd := rand.New(rand.NewPCG(1, 2))
		newest := "msg_0500"
		lateMisses := 0
		for step := range 300 {
			// 0–3 messages between two runs, ids mostly above the newest
			for range rnd.IntN(4) {
				id := fmt.Sprintf("msg_%04d", 500+step*4+rnd.IntN(4))
				late := rnd.IntN(8) == 0
				if late { // commits after a newer one
					id = fmt.Sprintf("msg_%04d_late%d", 500+step*4-rnd.IntN(20), step)
				}
				parent := ""
				if rnd.IntN(5) == 0 {
					parent = "run_child"
				}
				size := 1 + rnd.IntN(60) // the count bounds the transcript…
				if rnd.IntN(6) == 0 {
					size = 1 + rnd.IntN(3000) // …or the bytes do
				}
				content := strings.Repeat(string(rune('a'+step%26)), size)
				if _, err := st.MessageAppend(ctx, &store.MessageAppendParams{MessageID: id + ids.New(""), SessionID: sid, ParentRunID: parent, Role: "user", Content: content, CreatedAt: 1}); err != nil {
					t.Fatal(err)
				}
				if late && parent == "" && id < newest {
					lateMisses++
				}
				newest = max(newest, id)
			}
			got, err := cached.loadTranscript(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			want, err := whole.loadTranscript(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: from the copy %d messages, read whole %d:\n%.300v\n%.300v", step, len(got), len(want), got, want)
			}
		}
		memory, readWhole := transcriptReads(t, cached)
		if memory < 150 || memory+readWhole != 300 || lateMisses == 0 {
			t.Fatalf("%d of 300 transcripts from the copy, %d read whole, %d late messages: the test did not exercise both paths", memory, readWhole, lateMisses)
		}
		if memory, _ := transcriptReads(t, whole); memory != 0 || whole.transcripts.get(sid) != nil {
			t.Fatal("a manager without a cache kept a transcript")
		}
	})
}

// A session deleted and made again under its id starts its count afresh;
// the copy of the old one's transcript is never taken for the new one's,
// even when the counts line up (the old one's messages came before the
// version was counted: an upgraded database).
func TestTranscriptCacheForgetsADeletedSession(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st, log, createSession := transcriptStore(t, dialect)
		ctx := context.Background()
		m := New(log, Options{})
		sid := ids.New("ses")
		create := func(at int64, contents ...string) {
			t.Helper()
			createSession(sid, at)
			for _, c := range contents {
				if _, err := st.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, Role: "user", Content: c, CreatedAt: at}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond) // ids order by time
			}
		}
		create(1, "old secret")
		if err := testdb.Exec(t, st, `UPDATE sessions SET transcript_version = 0`); err != nil {
			t.Fatal(err)
		}
		if got, err := m.loadTranscript(ctx, sid); err != nil || len(got) != 1 || m.transcripts.get(sid) == nil {
			t.Fatalf("the old session: %v %v", got, err)
		}
		if err := st.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: sid, Owner: "test", Reason: "test", At: 2}); err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			var err error
			if _, done, err = st.SessionPurgeBatch(ctx, sid, 100); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SessionPurgeFinish(ctx, sid, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SessionTombstonesPrune(ctx, 4); err != nil {
			t.Fatal(err)
		}
		create(5) // the same id, no messages: counts 0, as the old copy does
		got, err := m.loadTranscript(ctx, sid)
		if err != nil || len(got) != 0 {
			t.Fatalf("the new session's transcript: %v %v", got, err)
		}
		// Retention tells the manager of a deletion: the copy goes at once.
		if m.transcripts.get(sid) == nil {
			t.Fatal("the new session's transcript was not kept")
		}
		if m.ForgetSession(sid); m.transcripts.get(sid) != nil {
			t.Fatal("ForgetSession kept the copy")
		}
	})
}
