package run

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// The cache holds at most its bound, dropping the least recently used
// copies; a copy larger than the bound is not kept, and an older version
// never replaces a newer one.
func TestTranscriptCacheBound(t *testing.T) {
	msgs := func(n, size int) []store.Message {
		out := make([]store.Message, n)
		for i := range out {
			out[i] = store.Message{MessageID: fmt.Sprintf("msg_%d", i), Content: strings.Repeat("x", size)}
		}
		return out
	}
	tc := newTranscriptCache(4*(1000+messageOverhead), metrics.New())
	for _, s := range []string{"a", "b", "c", "d"} {
		tc.put(s, 1, 1, msgs(1, 1000))
	}
	tc.get("a") // now b is the least recently used
	tc.put("e", 1, 1, msgs(1, 1000))
	if tc.get("b") != nil || tc.get("a") == nil || tc.get("e") == nil || tc.bytes != tc.max {
		t.Fatalf("after one too many: b kept %v, a %v, %d bytes of %d", tc.get("b") != nil, tc.get("a") != nil, tc.bytes, tc.max)
	}
	tc.put("big", 1, 1, msgs(5, 1000))
	if tc.get("big") != nil || len(tc.entries) != 4 {
		t.Fatalf("a copy over the bound was kept (%d entries)", len(tc.entries))
	}
	tc.put("a", 3, 1, msgs(2, 10))
	tc.put("a", 2, 1, msgs(1, 10))
	if c := tc.get("a"); c.version != 3 || len(c.msgs) != 2 {
		t.Fatalf("an older version replaced a newer one: %+v", c)
	}
	tc.put("a", 1, 7, msgs(1, 10)) // a session made again: its own count
	if c := tc.get("a"); c.version != 1 || c.createdAt != 7 {
		t.Fatalf("a new session's copy was refused: %+v", c)
	}
	tc.drop("a")
	if tc.get("a") != nil || len(tc.entries) != 3 {
		t.Fatal("drop kept the copy")
	}
	off := newTranscriptCache(-1, metrics.New())
	if off.put("a", 1, 1, msgs(1, 1)); off.get("a") != nil {
		t.Fatal("a cache turned off kept a copy")
	}
}

// BenchmarkLoadTranscript is a run's transcript read of a 200-turn session
// (two new messages before each, as a run adds), read whole and from this
// process's copy. In-process, on the real stores.
func BenchmarkLoadTranscript(b *testing.B) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		for _, cacheBytes := range []int64{-1, 0} {
			name := dialect + "/whole"
			if cacheBytes == 0 {
				name = dialect + "/copy"
			}
			b.Run(name, func(b *testing.B) {
				st, log, createSession := transcriptStore(b, dialect)
				ctx := context.Background()
				m := New(log, Options{TranscriptCacheBytes: cacheBytes})
				sid := ids.New("ses")
				createSession(sid, 1)
				turn := func(i int) {
					for _, role := range []string{"user", "assistant"} {
						if _, err := st.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, Role: role, Content: fmt.Sprintf("%s turn %d", role, i), CreatedAt: 1}); err != nil {
							b.Fatal(err)
						}
					}
				}
				for i := range 200 {
					turn(i)
				}
				if _, err := m.loadTranscript(ctx, sid); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					turn(200 + i)
					b.StartTimer()
					if got, err := m.loadTranscript(ctx, sid); err != nil || len(got) != 200 {
						b.Fatal(len(got), err)
					}
				}
			})
		}
	}
}
