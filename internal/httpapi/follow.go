package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
)

// followKeepAlive is how often an idle follow stream sends a comment, so
// proxies and clients can tell a quiet session from a dead connection.
const followKeepAlive = 15 * time.Second

// followWriteTimeout bounds one write of a follow stream: a client that
// stops reading for this long is dropped instead of holding the stream.
const followWriteTimeout = 30 * time.Second

// followEvents serves GET /v1/sessions/{id}/events?follow=1 as Server-Sent
// Events: every event after after_seq (or the Last-Event-ID a reconnecting
// client sends, which wins), first from the store page by page and then
// live, each as `id: <seq>` and `data: <event JSON>` (the shape of the
// events listing). It runs on the log's subscription, so the server holds
// at most a page of the session at a time however long it is, and a
// client that reconnects with its last id gets every later event exactly
// once, in order (DESIGN §2.1).
func (a *API) followEvents(w http.ResponseWriter, r *http.Request, sessionID string) {
	after, err := intParam(r, "after_seq", 0)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < 0 {
			respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "Last-Event-ID must be the seq of an event"))
			return
		}
		after = n
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if a.Closing != nil {
		// A shutting-down server ends its streams (clients resume
		// elsewhere or after the restart with Last-Event-ID).
		stop := context.AfterFunc(a.Closing, cancel)
		defer stop()
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(followWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// retry: how long an EventSource waits before reconnecting.
	if !write([]byte("retry: 2000\n: following session " + sessionID + " after seq " + strconv.FormatInt(after, 10) + "\n\n")) {
		return
	}
	sub := a.Log.Subscribe(sessionID, after)
	defer sub.Close()
	a.streams.Add(1)
	defer a.streams.Add(-1)
	buf := make([]byte, 0, 64<<10)
	for {
		wait, cancelWait := context.WithTimeout(ctx, followKeepAlive)
		evs, err := sub.Next(wait)
		cancelWait()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if !write([]byte(": keep-alive\n\n")) {
					return
				}
				continue
			}
			a.logger().Warn("follow: subscription ended", "session_id", sessionID, "err", err)
			return
		}
		buf = buf[:0]
		for i := range evs {
			buf = appendSSE(buf, &evs[i])
			// Flush in chunks: a catch-up page is written as a few large
			// writes, a live event at once.
			if len(buf) >= 48<<10 {
				if !write(buf) {
					return
				}
				buf = buf[:0]
			}
		}
		if len(buf) > 0 && !write(buf) {
			return
		}
	}
}

// appendSSE appends one event as an SSE message. JSON has no raw newlines,
// so the data fits one data: line.
func appendSSE(b []byte, e *store.Event) []byte {
	data, err := json.Marshal(e)
	if err != nil {
		data = []byte(`{}`)
	}
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

func (a *API) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}
