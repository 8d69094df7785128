package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/connlimit"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
)

// hardFrameLimit is where the connection is closed (1009) rather than
// answered: reading a frame this big just to discard it is abuse.
const hardFrameFactor = 16

// conn is one client connection. The HTTP handler's goroutine reads; each
// followed session has one goroutine delivering its events; pings are
// timers. An idle connection therefore costs one goroutine.
type conn struct {
	s   *Server
	ws  *websocket.Conn
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	// httpCtx is the upgrade request's context: it names the network
	// connection for connlimit.
	httpCtx context.Context

	wmu sync.Mutex // one writer at a time

	mu     sync.Mutex
	userID string
	subs   map[string]*follower // session id -> delivery

	ping *time.Timer
}

type follower struct {
	sessionID string
	// sub is deliver's: it may replace it (after a store error) and closes
	// it when it ends; others stop the delivery and wait for done.
	sub  *eventlog.Subscription
	stop context.CancelFunc
	done chan struct{}

	// delivered is the last seq the client has been sent (internal events
	// count as sent). It moves only after the write, unlike the
	// subscription's cursor, which moves when Next returns: a shutdown that
	// waits for delivered, not the cursor, does not close the socket while
	// the last events are still on their way (issue 8 item 5).
	delivered atomic.Int64
	moved     chan struct{} // a token when delivered moves
}

func newFollower(sub *eventlog.Subscription, stop context.CancelFunc, afterSeq int64) *follower {
	f := &follower{sessionID: sub.SessionID(), sub: sub, stop: stop, done: make(chan struct{}), moved: make(chan struct{}, 1)}
	f.delivered.Store(afterSeq)
	return f
}

// sent records that the client has everything up to seq.
func (f *follower) sent(seq int64) {
	f.delivered.Store(seq)
	select {
	case f.moved <- struct{}{}:
	default:
	}
}

func newConn(s *Server, ws *websocket.Conn, httpCtx context.Context) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{s: s, ws: ws, log: s.opts.Logger, ctx: ctx, cancel: cancel, httpCtx: httpCtx, subs: map[string]*follower{}}
}

func (c *conn) serve() {
	defer c.teardown()
	max := c.s.opts.MaxFrameBytes
	c.ws.SetReadLimit(int64(max) * hardFrameFactor)
	c.ws.SetReadDeadline(time.Now().Add(c.s.opts.HelloTimeout))
	c.ws.SetPongHandler(func(string) error {
		if c.user() == "" {
			// Before hello the hello deadline stands: a client sending
			// pongs (unasked) must not keep an unauthenticated
			// connection open.
			return nil
		}
		return c.ws.SetReadDeadline(time.Now().Add(c.s.opts.PongWait))
	})
	c.ping = time.AfterFunc(c.s.opts.PingInterval, c.sendPing)
	for {
		mt, r, err := c.ws.NextReader()
		if err != nil {
			c.readFailed(err)
			return
		}
		// Buffer one byte past the limit to tell "at the limit" from "over".
		data, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
		if err != nil {
			c.readFailed(err)
			return
		}
		if len(data) > max {
			if _, err := io.Copy(io.Discard, r); err != nil {
				c.closeWith(websocket.CloseMessageTooBig, "message too large")
				return
			}
			c.send(errorReply(requestIDOfPrefix(data), "message_too_large", "messages are limited to "+respond.Size(int64(max))))
			continue
		}
		if mt != websocket.TextMessage {
			// Named when the bytes are JSON: the client learns which of
			// its requests failed.
			c.send(errorReply(requestIDOf(data), "invalid_message", "only JSON text frames are accepted"))
			continue
		}
		if c.user() == "" {
			if !c.hello(data) {
				return
			}
			continue
		}
		c.ws.SetReadDeadline(time.Now().Add(c.s.opts.PongWait))
		c.handle(data)
	}
}

func (c *conn) user() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.userID
}

// hello authenticates; a bad or missing hello is answered and closed.
func (c *conn) hello(data []byte) bool {
	userID, key, requestID, ok := decodeHello(data)
	if !ok {
		c.send(errorReply(requestID, "unauthorized", "the first message must be hello {user_id, api_key}"))
		c.closeWith(websocket.ClosePolicyViolation, "hello required")
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, commandTimeout)
	known, err := c.s.keys.UserByKey(ctx, userID, key)
	cancel()
	if err != nil {
		// The store could not say (user keys created over the API live
		// there): the client may retry; nothing was decided.
		c.fail(requestID, err)
		c.closeWith(websocket.CloseTryAgainLater, "try again later")
		return false
	}
	if !known {
		c.send(errorReply(requestID, "unauthorized", "unknown user_id or api_key"))
		c.closeWith(websocket.ClosePolicyViolation, "unauthorized")
		return false
	}
	connlimit.Authenticated(c.httpCtx)
	tooMany := func() bool {
		c.send(errorReply(requestID, "too_many_connections", fmt.Sprintf("user %s already has %d connections open (the limit); close one first", userID, c.s.opts.MaxPerUser)))
		c.closeWith(websocket.ClosePolicyViolation, "too many connections")
		return false
	}
	if !c.s.admit(userID) {
		return tooMany()
	}
	if uc := c.s.opts.UserConnections; uc != nil {
		ctx, cancel := context.WithTimeout(c.ctx, commandTimeout)
		ok, err := uc.Admit(ctx, userID)
		cancel()
		if err != nil || !ok {
			c.s.leave(userID)
			if err != nil {
				c.fail(requestID, err)
				c.closeWith(websocket.CloseTryAgainLater, "try again later")
				return false
			}
			return tooMany()
		}
	}
	c.mu.Lock()
	c.userID = userID
	c.mu.Unlock()
	c.log = c.log.With("user_id", userID)
	c.ws.SetReadDeadline(time.Now().Add(c.s.opts.PongWait))
	c.send(&reply{Type: "ready", TS: nowMS(), RequestID: requestID, UserID: userID})
	return true
}

// readFailed says why, where the client is owed a reason, before the
// connection ends on a failed read: a frame over the hard limit is closed
// with 1009; a client that said no valid hello within HelloTimeout is told
// so, as a bad hello is, rather than only losing its TCP connection (the
// read deadline has passed; writes have their own).
func (c *conn) readFailed(err error) {
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		c.closeWith(websocket.CloseMessageTooBig, "message too large")
	case c.user() == "" && isTimeout(err):
		c.send(errorReply("", "hello_timeout", "no hello within "+c.s.opts.HelloTimeout.String()+"; the first message must be hello {user_id, api_key}"))
		c.closeWith(websocket.ClosePolicyViolation, "hello timeout")
	}
}

// isTimeout reports whether a read failed on its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *conn) sendPing() {
	deadline := time.Now().Add(c.s.opts.WriteTimeout)
	if err := c.ws.WriteControl(websocket.PingMessage, nil, deadline); err != nil {
		c.cancel()
		c.ws.Close()
		return
	}
	c.ping.Reset(c.s.opts.PingInterval)
}

// send writes a reply (not from the log).
func (c *conn) send(r *reply) {
	b, _ := json.Marshal(r)
	c.write(b)
}

// write sends one text message; a failed write ends the connection (the
// client resumes from its last seq when it comes back).
func (c *conn) write(b []byte) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.cancel()
		c.ws.Close()
		return false
	}
	return true
}

// coalesceMax bounds the bytes writeAll puts in one write to the socket;
// a message larger than that goes alone, through gorilla/websocket.
const coalesceMax = 64 << 10

var coalesceBufs = sync.Pool{New: func() any { return new([]byte) }}

// writeAll sends msgs as text messages, as many as fit in coalesceMax per
// write to the socket: a delivery of several events — a batch of the log
// that holds a few of the session's, a backlog — costs one syscall rather
// than one per event (issue 13: at 1,000 streams on a loaded machine the
// writes were a quarter of the server's CPU). The frames are what
// gorilla/websocket writes for a server's text message — unmasked, one
// fragment, no compression (the upgrader offers none). Control frames
// (pings, the close) still go through gorilla, one write each, so they
// fall between these writes, never inside one.
func (c *conn) writeAll(msgs [][]byte) bool {
	if len(msgs) == 1 {
		return c.write(msgs[0])
	}
	bp := coalesceBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= 2*coalesceMax { // what the pool lends stays bounded
			*bp = buf[:0]
		}
		coalesceBufs.Put(bp)
	}()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// Each write gets its own deadline, as each message did: a long backlog
	// to a slow client is bounded per write, not as a whole. The socket's
	// too: gorilla's SetWriteDeadline only applies to gorilla's writes, and
	// the socket keeps the deadline of the last one — a ping's, long past
	// when the session was quiet.
	deadline := func() {
		d := time.Now().Add(c.s.opts.WriteTimeout)
		c.ws.SetWriteDeadline(d)
		c.ws.NetConn().SetWriteDeadline(d)
	}
	flush := func() bool {
		if len(buf) == 0 {
			return true
		}
		deadline()
		_, err := c.ws.NetConn().Write(buf)
		buf = buf[:0]
		return err == nil
	}
	ok := true
	for _, m := range msgs {
		if len(m) > coalesceMax {
			if ok = flush(); ok {
				deadline()
				ok = c.ws.WriteMessage(websocket.TextMessage, m) == nil
			}
		} else {
			if len(buf)+len(m)+10 > coalesceMax {
				ok = flush()
			}
			buf = appendTextFrame(buf, m)
		}
		if !ok {
			break
		}
	}
	if ok {
		ok = flush()
	}
	if !ok {
		c.cancel()
		c.ws.Close()
	}
	return ok
}

// appendTextFrame appends m as one unmasked, final text frame (RFC 6455
// §5.2).
func appendTextFrame(b, m []byte) []byte {
	const finText = 0x81
	switch n := len(m); {
	case n <= 125:
		b = append(b, finText, byte(n))
	case n <= 0xffff:
		b = append(b, finText, 126, byte(n>>8), byte(n))
	default:
		b = append(b, finText, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, m...)
}

func (c *conn) closeWith(code int, text string) {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
	c.cancel()
	c.ws.Close()
}

func (c *conn) teardown() {
	if c.ping != nil {
		c.ping.Stop()
	}
	if u := c.user(); u != "" {
		c.s.leave(u)
		if uc := c.s.opts.UserConnections; uc != nil {
			uc.Leave(u)
		}
	}
	c.cancel()
	c.ws.Close()
	c.mu.Lock()
	subs := c.subs
	c.subs = map[string]*follower{}
	c.mu.Unlock()
	for sid, f := range subs {
		f.stop()
		<-f.done
		c.s.follow(c, sid, false)
	}
}

// followers lists the deliveries of c.
func (c *conn) followers() []*follower {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*follower, 0, len(c.subs))
	for _, f := range c.subs {
		out = append(out, f)
	}
	return out
}

// drain waits, bounded by ctx, until each followed session has been sent up
// to its seq in last (what the log held when the shutdown began), so a
// shutdown does not cut the last events. A delivery that ended (a failed
// write) is not waited for.
func (c *conn) drain(ctx context.Context, last map[string]int64) {
	for _, f := range c.followers() {
		target, ok := last[f.sessionID]
		if !ok {
			continue
		}
		for f.delivered.Load() < target {
			select {
			case <-f.moved:
			case <-f.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}
