package storetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// BenchmarkEventsAppendBatch is one event-log commit of a delivery batch —
// one delta in each of several sessions, appended and notified in one
// transaction — as a micro-benchmark of the store alone (no server, no
// WebSocket). Besides time per commit it reports the database server's CPU
// per commit (db-µs/op: the CPU of every process named postgres, from
// /proc, so run it on an otherwise idle machine), since a statement that
// costs the client less can cost the server more:
//
//	go test -run X -bench EventsAppendBatch ./internal/store/storetest/
func BenchmarkEventsAppendBatch(b *testing.B) {
	for _, dialect := range testdb.Dialects {
		for _, sessions := range []int{1, 12, 50} {
			b.Run(fmt.Sprintf("%s/sessions=%d", dialect, sessions), func(b *testing.B) {
				s := testdb.Open(b, dialect)
				ctx := context.Background()
				ids := make([]string, sessions)
				for i := range ids {
					ids[i] = newSession(b, s)
				}
				batch := make([]store.EventParams, sessions)
				payload := []byte(`{"text":"a delta of a streamed answer, about this long"}`)
				db0 := processCPU("postgres")
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range batch {
						batch[j] = store.EventParams{SessionID: ids[j], RunID: "run_" + ids[j], TS: int64(i), Type: "agent_stream_delta", Payload: payload}
					}
					if err := s.InTx(ctx, func(tx store.Queries) error {
						_, err := tx.EventsAppendNotify(ctx, batch, "bench", ids)
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if dialect == "postgres" {
					b.ReportMetric(float64((processCPU("postgres")-db0).Microseconds())/float64(b.N), "db-µs/op")
				}
			})
		}
	}
}

// processCPU is the user and system CPU of every process named name.
func processCPU(name string) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range stats {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces; fields after it.
		open, end := strings.IndexByte(string(raw), '('), strings.LastIndexByte(string(raw), ')')
		if open < 0 || end < 0 || string(raw[open+1:end]) != name {
			continue
		}
		f := strings.Fields(string(raw[end+2:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}
