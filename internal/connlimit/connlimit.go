// Package connlimit bounds the connections a server holds open (issue 8:
// 4,000 unauthenticated clients trickling bytes stayed open for minutes).
// A Listener counts every accepted connection and those that have not yet
// authenticated — presented a valid key on a request, or said a valid
// WebSocket hello. Over the unauthenticated cap it closes the oldest
// unauthenticated connection to make room, so a flood of silent or
// trickling clients cannot starve the ones that authenticate at once; over
// the total cap, when every connection has authenticated, a new one is
// answered 503 too_many_connections and closed.
package connlimit

import (
	"container/list"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are the caps; zero means no cap.
type Limits struct {
	// Total bounds the connections open at once (HTTP and WebSocket).
	Total int
	// Unauthenticated bounds the connections that have not authenticated yet.
	Unauthenticated int
}

// Listener wraps a net.Listener with Limits. Serve it with an http.Server
// whose ConnContext is ConnContext, so handlers can mark their connection
// authenticated (Authenticated).
type Listener struct {
	net.Listener
	limits Limits

	mu      sync.Mutex
	total   int
	pending list.List // *Conn not yet authenticated, oldest first

	refusing atomic.Int32 // goroutines answering refused connections
	evicted  atomic.Int64
	refused  atomic.Int64
}

// refusingMax bounds the goroutines writing 503s to refused connections;
// beyond it a refused connection is closed without an answer.
const refusingMax = 64

// Listen wraps ln.
func Listen(ln net.Listener, limits Limits) *Listener {
	return &Listener{Listener: ln, limits: limits}
}

// Stats reports the open connections, those not yet authenticated, and
// how many were evicted (unauthenticated cap) or refused (total cap) so far.
func (l *Listener) Stats() (open, unauthenticated int, evicted, refused int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.pending.Len(), l.evicted.Load(), l.refused.Load()
}

// Accept returns the next connection within the limits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &Conn{Conn: nc, l: l}
		var evict *Conn
		l.mu.Lock()
		if l.limits.Unauthenticated > 0 && l.pending.Len() >= l.limits.Unauthenticated {
			evict = l.pending.Front().Value.(*Conn)
		} else if l.limits.Total > 0 && l.total >= l.limits.Total {
			if f := l.pending.Front(); f != nil {
				evict = f.Value.(*Conn)
			} else {
				l.mu.Unlock()
				l.refuse(nc)
				continue
			}
		}
		if evict != nil {
			// Counted as closed now, so the new connection fits; the
			// eviction's own Close then finds nothing to release.
			l.releaseLocked(evict)
			l.evicted.Add(1)
		}
		l.total++
		c.elem = l.pending.PushBack(c)
		l.mu.Unlock()
		if evict != nil {
			evict.Conn.Close()
		}
		return c, nil
	}
}

// refuse answers a connection over the total cap with a 503 and closes it.
// The answer is written before the client has sent anything; the close
// waits a moment for its request so the client reads the answer rather
// than a reset.
func (l *Listener) refuse(nc net.Conn) {
	l.refused.Add(1)
	if l.refusing.Add(1) > refusingMax {
		l.refusing.Add(-1)
		nc.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer nc.Close()
		body := `{"error":{"code":"too_many_connections","message":"the server has ` + strconv.Itoa(l.limits.Total) + ` connections open; try again later"}}` + "\n"
		nc.SetDeadline(time.Now().Add(time.Second))
		_, err := nc.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
		if err != nil {
			return
		}
		if tc, ok := nc.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
		var buf [4096]byte
		for {
			if _, err := nc.Read(buf[:]); err != nil {
				return
			}
		}
	}()
}

// releaseLocked takes c out of the counts once.
func (l *Listener) releaseLocked(c *Conn) {
	if c.released {
		return
	}
	c.released = true
	l.total--
	if c.elem != nil {
		l.pending.Remove(c.elem)
		c.elem = nil
	}
}

// Conn is an accepted connection.
type Conn struct {
	net.Conn
	l *Listener

	// Guarded by l.mu.
	elem     *list.Element // in l.pending while unauthenticated
	released bool
}

// Close closes the connection and releases its place.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// authenticated takes c off the unauthenticated list.
func (c *Conn) authenticated() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.elem != nil {
		c.l.pending.Remove(c.elem)
		c.elem = nil
	}
}

type ctxKey struct{}

// ConnContext is the http.Server hook that lets handlers find their
// connection (Authenticated).
func ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := nc.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, c)
	}
	return ctx
}

// Authenticated marks the connection serving ctx's request as
// authenticated: it no longer counts against the unauthenticated cap and
// is not evicted. A context without a connection is ignored.
func Authenticated(ctx context.Context) {
	if c, ok := ctx.Value(ctxKey{}).(*Conn); ok {
		c.authenticated()
	}
}

// CloseWrite half-closes a TCP connection (net/http uses it to let a
// client read an error answer before the close).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
