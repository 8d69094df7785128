package toolsvc

import (
	"context"
	"slices"
	"time"

	"github.com/agentplane/agentplane/internal/store"
)

// toolRowTTL bounds how long a tool's row is used without reading it again
// (registry.rows, issue 13: one statement fewer per call). Changes do not
// wait for it: this process forgets the rows when it writes one, and other
// processes when they hear of the write (store.NotifyToolsChanged, or a
// listener reconnect, which forgets everything). It only bounds a change
// missed while notifications were not arriving.
const toolRowTTL = 2 * time.Second

// writeTools runs fn, which writes tool rows, in one transaction that also
// tells the processes sharing the store (the word is sent when it commits,
// on PostgreSQL; SQLite has one process), then forgets this process's
// rows: after the commit, so a read from then on sees the write.
func (s *Service) writeTools(ctx context.Context, fn func(tx store.Queries) error) error {
	err := s.st.InTx(ctx, func(tx store.Queries) error {
		if err := fn(tx); err != nil {
			return err
		}
		return tx.EventsNotify(ctx, s.log.Origin(), []string{store.NotifyToolsChanged})
	})
	s.registry.rows.Forget()
	return err
}

// heardToolsChanged is the remote half: another process wrote a tool, or
// notifications may have been missed (nil).
func (s *Service) heardToolsChanged(sessionIDs []string) {
	if sessionIDs == nil || slices.Contains(sessionIDs, store.NotifyToolsChanged) {
		s.registry.rows.Forget()
	}
}
