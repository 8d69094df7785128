package postgres

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/internal/store"
)

// Listen follows store.NotifyChannel until ctx ends, reconnecting when the
// connection drops. fn gets each payload's origin and session ids; after
// every (re)connect it gets a call with nil sessions, meaning "notifications
// may have been missed: re-check everything".
func Listen(ctx context.Context, url string, log *slog.Logger, fn func(origin string, sessionIDs []string)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := listenOnce(ctx, url, fn)
		if ctx.Err() != nil {
			return
		}
		log.Warn("event notification listener lost its connection; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func listenOnce(ctx context.Context, url string, fn func(string, []string)) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+store.NotifyChannel); err != nil {
		return err
	}
	fn("", nil)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		origin, ids, _ := strings.Cut(n.Payload, " ")
		fn(origin, strings.Split(ids, ","))
	}
}
