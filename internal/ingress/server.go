// Package ingress is the client side of agentplane: the WebSocket protocol
// of DESIGN §4. It authenticates clients, turns their messages into
// orchestrator commands, and delivers committed events of the sessions a
// connection follows. It knows nothing of agents or policy.
package ingress

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// Options tune the protocol's limits. Zero values pick defaults.
type Options struct {
	// MaxFrameBytes is the largest message accepted; larger ones get an
	// error reply and the connection stays open. Default 1 MiB.
	MaxFrameBytes int
	// HelloTimeout is how long a new connection may take to say a valid
	// hello; then it is closed. Default 10 s.
	HelloTimeout time.Duration
	// MaxPerUser bounds the connections one user may hold open on this
	// process; a hello over it gets error too_many_connections and the
	// connection is closed. 0 means no cap.
	MaxPerUser int
	// UserConnections, when set, counts a user's connections across the
	// processes sharing the database (DESIGN §15: the cap holds across
	// replicas): Admit reports whether one more is allowed and counts it,
	// Leave uncounts it. Nil: this process's count is all there is.
	UserConnections UserConnections
	// PingInterval is how often the server pings; a client that has not
	// answered within PongWait is dropped.
	PingInterval time.Duration
	PongWait     time.Duration
	// WriteTimeout bounds one write to a client.
	WriteTimeout time.Duration
	// DrainWait bounds how long a shutdown waits for clients to be sent
	// the events committed before it began. Default 2 s.
	DrainWait time.Duration
	Logger    *slog.Logger
	// Tools answers tool_result and approval_decision and lists what a
	// session still waits for after a subscribe. Nil refuses those messages.
	Tools Tools
	// Presence, when set, records in the store whether this process has
	// connections following a session (1) or none any more (0), so another
	// process sharing the database that dispatches one of the session's
	// client tools finds the client (DESIGN §8; store.SessionClientsSet).
	// It is called from the ingress's own goroutines, in order per session;
	// an agent_invoke waits briefly for it before the run starts. Nil means
	// only this process asks (Connected).
	Presence func(ctx context.Context, sessionID string, connections int) error
}

// Tools is the tool-call side of the protocol (toolsvc.Service).
type Tools interface {
	SubmitClientResult(ctx context.Context, r toolsvc.ClientResult) (*toolsvc.CallView, error)
	Decide(ctx context.Context, p toolsvc.DecideParams) (*store.Approval, error)
	Pending(ctx context.Context, sessionID string) ([]map[string]any, error)
}

// UserConnections counts a user's WebSocket connections across processes.
type UserConnections interface {
	Admit(ctx context.Context, userID string) (bool, error)
	Leave(userID string)
}

// Server serves GET /v1/ws.
type Server struct {
	keys     *auth.Keys
	runs     *run.Manager
	log      *eventlog.Log
	st       store.Store
	opts     Options
	upgrader websocket.Upgrader
	presence *presence // nil without Options.Presence

	mu       sync.Mutex
	conns    map[*conn]struct{}
	sessions map[string]map[*conn]struct{} // session -> connections following it
	users    map[string]int                // user -> connections that said hello
	closing  bool
	count    atomic.Int64
}

// New builds the ingress.
func New(keys *auth.Keys, runs *run.Manager, log *eventlog.Log, opts Options) *Server {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = 1 << 20
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = 10 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 25 * time.Second
	}
	if opts.PongWait <= 0 {
		opts.PongWait = opts.PingInterval + 15*time.Second
	}
	if opts.DrainWait <= 0 {
		opts.DrainWait = 2 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{keys: keys, runs: runs, log: log, st: log.Store(), opts: opts,
		conns: map[*conn]struct{}{}, sessions: map[string]map[*conn]struct{}{}, users: map[string]int{}}
	if opts.Presence != nil {
		s.presence = newPresence(opts.Presence, opts.Logger)
	}
	s.upgrader = websocket.Upgrader{
		// Zero buffer sizes reuse the HTTP server's buffers, and a pool
		// lends write buffers only while writing: an idle connection holds
		// no buffer of its own (memory per idle connection, issue 2).
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     func(*http.Request) bool { return true }, // auth is the hello key, not cookies
		Error:           upgradeError,
	}
	return s
}

// upgradeError answers a request the upgrader refused with the structured
// error every HTTP refusal is (DESIGN §2.7), not gorilla's text/plain
// status line: 400 websocket_upgrade_required for a request that is not a
// WebSocket handshake (a plain GET, a missing key or version), 405 for a
// method other than GET (HEAD reaches here through the GET route), and an
// internal error, logged, when the connection cannot be taken over.
func upgradeError(w http.ResponseWriter, r *http.Request, status int, reason error) {
	// As gorilla does: the version header tells a client which one to speak.
	w.Header().Set("Sec-Websocket-Version", "13")
	switch {
	case status == http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodGet)
		respond.Err(w, r, respond.E(status, "method_not_allowed", "a WebSocket handshake is a GET request"))
	case status >= http.StatusInternalServerError:
		respond.Err(w, r, fmt.Errorf("websocket upgrade: %w", reason))
	default:
		respond.Err(w, r, respond.E(status, "websocket_upgrade_required",
			r.URL.Path+" takes a WebSocket handshake: "+strings.TrimPrefix(reason.Error(), "websocket: ")))
	}
}

// Connections is the number of open client connections.
func (s *Server) Connections() int64 { return s.count.Load() }

// Connected reports whether any connection of this process follows
// sessionID (DESIGN §8: a client tool needs one). Connections to other
// processes are seen through the store (Options.Presence).
func (s *Server) Connected(sessionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions[sessionID]) > 0
}

// ServeHTTP upgrades and runs one connection until it closes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		respond.Err(w, r, run.ErrShuttingDown)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	c := newConn(s, ws, r.Context())
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.count.Add(1)
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.count.Add(-1)
	}()
	c.serve()
}

// admit counts a connection of userID, or reports false when the user
// already holds MaxPerUser.
func (s *Server) admit(userID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.MaxPerUser > 0 && s.users[userID] >= s.opts.MaxPerUser {
		return false
	}
	s.users[userID]++
	return true
}

// leave uncounts a connection admit counted.
func (s *Server) leave(userID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[userID]--; s.users[userID] <= 0 {
		delete(s.users, userID)
	}
}

// follow adds c to (or removes it from) the connections following
// sessionID. When the session gains its first local connection or loses its
// last, the change is written through to the store; under s.mu, so the
// writes are queued in the order of the changes.
func (s *Server) follow(c *conn, sessionID string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.sessions[sessionID]
	if on {
		if m == nil {
			m = map[*conn]struct{}{}
			s.sessions[sessionID] = m
		}
		m[c] = struct{}{}
		if len(m) == 1 {
			s.presence.set(sessionID, true)
		}
		return
	}
	if _, ok := m[c]; !ok {
		return
	}
	delete(m, c)
	if len(m) == 0 {
		delete(s.sessions, sessionID)
		s.presence.set(sessionID, false)
	}
}

// Shutdown refuses new connections, waits (up to Options.DrainWait) until every
// connection has been sent the events its sessions' logs held when the
// shutdown began, then closes every connection with 1001 so clients
// reconnect elsewhere and resume from their last seq. Presence writes still
// queued get until ctx ends; then the caller should drop this process's
// presence rows (store.SessionClientsDeleteInstance).
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, s.opts.DrainWait)
	// The run manager has written its runs' last events by now (the caller
	// shut it down first): each session's last seq, read once, is what
	// its clients must receive before the close.
	last := map[string]int64{}
	for _, c := range conns {
		for _, f := range c.followers() {
			sid := f.sessionID
			if _, ok := last[sid]; ok {
				continue
			}
			sess, err := s.st.SessionGet(dctx, sid)
			if err != nil {
				s.opts.Logger.Warn("shutdown: read session end", "session_id", sid, "err", err)
				continue
			}
			last[sid] = sess.LastSeq
		}
	}
	for _, c := range conns {
		c.drain(dctx, last)
	}
	cancel()
	// All at once: a client that stopped reading holds its close up to
	// closeWith's second (its delivery has the socket), and one after
	// another a few of them would outlast the caller's deadline.
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.closeWith(websocket.CloseGoingAway, "server shutting down")
		}()
	}
	wg.Wait()
	s.presence.stop(ctx)
}

// Hold counts a client of sessionID that is not a WebSocket connection —
// an A2A request following the session (DESIGN §12) — exactly as a
// connection following it, until release is called (release may be called
// more than once). A client tool dispatched meanwhile finds the session's
// client instead of failing client_offline. It counts for this process at
// once; recorded waits, like agent_invoke does and bounded by its ctx, until
// other processes are told — separately, so the caller can do other work
// meanwhile.
func (s *Server) Hold(sessionID string) (recorded func(context.Context), release func()) {
	token := &conn{} // only a key among the session's followers
	s.follow(token, sessionID, true)
	var once sync.Once
	return func(ctx context.Context) { s.presence.flushed(ctx, sessionID) },
		func() { once.Do(func() { s.follow(token, sessionID, false) }) }
}
