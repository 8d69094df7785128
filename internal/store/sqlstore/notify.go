package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

// notifyPayloadMax keeps NOTIFY payloads under PostgreSQL's 8000-byte limit.
const notifyPayloadMax = 7000

// EventsNotify sends pg_notify on PostgreSQL (delivered at commit, so a
// listener never hears of uncommitted events) and nothing on SQLite.
func (q *queries) EventsNotify(ctx context.Context, origin string, sessionIDs []string) error {
	if q.d.Name != "postgres" || len(sessionIDs) == 0 {
		return nil
	}
	var b strings.Builder
	send := func() error {
		if b.Len() == 0 {
			return nil
		}
		// Nothing reads its answer: in a pipelined transaction it goes
		// with the commit.
		err := q.execLater(ctx, `SELECT pg_notify(?, ?)`, store.NotifyChannel, origin+" "+b.String())
		b.Reset()
		return err
	}
	for _, id := range sessionIDs {
		if b.Len()+len(id)+len(origin)+2 > notifyPayloadMax {
			if err := send(); err != nil {
				return fmt.Errorf("notify: %w", err)
			}
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id)
	}
	if err := send(); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}
