package run

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// BenchmarkRunEnd is the end of a root run that started no child, called
// no tool and made no LLM call — most runs: the guarded transition, what
// the cascade reads, the answer's transcript row and the terminal events,
// committed through the event log — on each store. The OnEnd hook reads
// the run's open tool calls, as the tool service's does. A micro-benchmark
// of the run manager, the event log and the store, without an agent or
// HTTP; the product's figure is bench/a2a's, on the binary.
func BenchmarkRunEnd(b *testing.B) {
	for _, d := range []string{"sqlite", "postgres"} {
		b.Run(d, func(b *testing.B) {
			st := testdb.Open(b, d)
			log := eventlog.New(st, eventlog.Options{Origin: "bench"})
			b.Cleanup(log.Stop)
			m := New(log, Options{InstanceID: "bench", OnEnd: func(ctx context.Context, tx store.Queries, run *store.Run, _ int64, _ string) ([]store.EventParams, error) {
				_, err := tx.ToolCallListActiveByRun(ctx, run.RunID)
				return nil, err
			}})
			ctx := context.Background()
			sid := ids.New("ses")
			if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: 1}); err != nil {
				b.Fatal(err)
			}
			end := func() {
				run, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", UserID: "u", Owner: "bench", StartedAt: 2})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				_, err = log.Do(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
					evs, _, err := m.EndTx(ctx, tx, run, 3, End{Status: store.RunDone, Usage: json.RawMessage(`{}`), Output: "pong", Reason: "the run finished",
						Invoke: map[string]any{"duration_ms": 1, "deltas": 1}})
					return evs, err
				})
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for range 200 {
				end()
			}
			b.ResetTimer()
			for range b.N {
				end()
			}
		})
	}
}
