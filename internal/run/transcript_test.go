package run

import (
	"context"
	"fmt"
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

// The transcript sent to an agent keeps the newest messages that fit in
// its byte bound; the first that does not fit is cut with a marker, so one
// message over the bound never empties it.
func TestTranscriptIsBoundedNewestFirst(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		log := eventlog.New(st, eventlog.Options{})
		t.Cleanup(log.Stop)
		ctx := context.Background()
		session := func(contents ...string) string {
			sid := ids.New("ses")
			if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
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
