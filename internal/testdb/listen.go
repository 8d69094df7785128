package testdb

import (
	"context"
	"log/slog"
	"sync"

	"github.com/agentplane/agentplane/internal/store/postgres"
)

// Listen follows the notifications of the PostgreSQL database at dsn into
// fn (postgres.Listen, as a replica's server does) and returns once the
// listener is connected, so that nothing notified afterwards is missed.
// stop ends it and waits for it; call it before whatever fn feeds stops.
func Listen(dsn string, fn func(origin string, sessionIDs []string)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	listening, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(stopped)
		postgres.Listen(ctx, dsn, slog.Default(), func(origin string, sessionIDs []string) {
			if sessionIDs == nil { // (re)connected
				once.Do(func() { close(listening) })
			}
			fn(origin, sessionIDs)
		})
	}()
	select {
	case <-listening:
	case <-stopped:
	}
	return func() { cancel(); <-stopped }
}
