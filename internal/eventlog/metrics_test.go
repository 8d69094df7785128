package eventlog

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// agentplane_event_commit_seconds observes every commit once — those of
// write-behind appends (an agent's deltas, LLM call records) included, the
// main event path — and is exported before the first one.
func TestCommitLatencyObservesEveryCommit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		reg := metrics.New()
		l := New(st, Options{BehindLinger: time.Millisecond, Metrics: reg})
		defer l.Stop()
		count := func() int {
			var b bytes.Buffer
			if err := reg.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`(?m)^agentplane_event_commit_seconds_count (\d+)$`).FindSubmatch(b.Bytes())
			if m == nil {
				t.Fatalf("agentplane_event_commit_seconds_count not exported:\n%s", b.Bytes())
			}
			n, _ := strconv.Atoi(string(m[1]))
			return n
		}
		if n := count(); n != 0 {
			t.Fatalf("%d commits observed before any", n)
		}
		sid := session(t, st)
		ctx := context.Background()
		for i := range 5 {
			done := make(chan error, 1)
			if err := l.AppendBehind(ctx, func(_ []store.Event, err error) { done <- err }, ev(sid, "delta", i)); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, ev(sid, "state", i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, commits := l.Stats(); count() != int(commits) || commits < 10 {
			t.Fatalf("%d commits observed of %d", count(), commits)
		}
	})
}
