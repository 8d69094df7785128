package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// MessagesTranscript returns, oldest first, the newest root-level messages
// that begin within the byte budget counted from the newest — so the
// caller can cut the one across it — and no more than limit of them.
func TestMessagesTranscript(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		add := func(id, parent, content string) {
			t.Helper()
			if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: id, SessionID: sid, ParentRunID: parent, Role: "user", Content: content, CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// msg_00 … msg_09, 1,000 bytes each ("é" is two), and a child
		// run's turn among them, which a root agent's transcript leaves out.
		for i := range 10 {
			add(fmt.Sprintf("msg_%02d", i), "", fmt.Sprintf("%02d", i)+strings.Repeat("é", 499))
			if i == 8 {
				add("msg_08x", "run_parent", "a child's turn")
			}
		}
		ids := func(limit, budget int) string {
			t.Helper()
			msgs, err := s.MessagesTranscript(ctx, sid, limit, budget)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, m := range msgs {
				if len(m.Content) != 1000 || m.SessionID != sid || m.ParentRunID != "" {
					t.Fatalf("message %+v", m)
				}
				out = append(out, m.MessageID)
			}
			return strings.Join(out, ",")
		}
		for _, c := range []struct {
			limit, budget int
			want          string
		}{
			{200, 2500, "msg_07,msg_08,msg_09"}, // two fit, the third begins at 2,000 < 2,500
			{200, 2000, "msg_07,msg_08,msg_09"}, // the third begins exactly at the bound: the caller decides
			{200, 1999, "msg_08,msg_09"},        // …and one byte less leaves it out
			{2, 1 << 20, "msg_08,msg_09"},       // the count bound
			{200, 1 << 20, "msg_00,msg_01,msg_02,msg_03,msg_04,msg_05,msg_06,msg_07,msg_08,msg_09"},
			{200, 1, "msg_09"}, // the newest always begins within the budget
			{0, 1000, ""}, {5, 0, ""},
		} {
			if got := ids(c.limit, c.budget); got != c.want {
				t.Errorf("limit %d, budget %d: %s, want %s", c.limit, c.budget, got, c.want)
			}
		}
		if msgs, err := s.MessagesTranscript(ctx, "ses_none", 200, 1000); err != nil || len(msgs) != 0 {
			t.Fatalf("unknown session: %v %v", msgs, err)
		}
	})
}
