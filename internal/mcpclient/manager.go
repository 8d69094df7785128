// Package mcpclient connects agentplane to MCP servers used as tool sources
// (DESIGN §13, issue 12), with github.com/modelcontextprotocol/go-sdk.
//
// The Manager keeps the registry of servers (the store's mcp_servers rows,
// written through PUT/DELETE /v1/mcp_servers/{name} or the config file)
// and one long-lived client session per server in this process: every
// replica connects to every server. A session that drops is reconnected
// with exponential backoff (a stdio server's process is started again);
// the server's tool list is cached, listed again on
// notifications/tools/list_changed and after every reconnect, and kept
// while the server is away, so its calls fail tool_unreachable at once
// instead of the tools vanishing. Replicas pick up each other's changes
// to the registry within Options.ReconcileInterval.
//
// The tool service (internal/toolsvc) sees the Manager as its MCPSource:
// it offers each listed tool as "{server}@{tool}" and runs every call
// through its state machine; the Manager only carries the tools/call.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// Options configure a Manager. Zero values pick defaults.
type Options struct {
	Logger *slog.Logger
	// Allow checks a Streamable HTTP server's URL at registration, and its
	// dialer every address connected to (nil: public addresses only).
	Allow *agent.Allowlist
	// ReconcileInterval is how often the registry is read again, so that a
	// change made through another replica is applied here. Default 2 s.
	ReconcileInterval time.Duration
	// BackoffMin and BackoffMax bound the wait before a reconnect, doubled
	// after every failed attempt. Defaults 500 ms and 30 s.
	BackoffMin, BackoffMax time.Duration
	// ConnectTimeout bounds one connect, initialize and first tools/list.
	// Default 30 s.
	ConnectTimeout time.Duration
	// StopGrace is how long a stdio server may take to exit once its stdin
	// is closed, and again after SIGTERM, before it is killed. Default 2 s.
	StopGrace time.Duration
	// KeepAlive is the interval of the pings that notice a silent server
	// (0: default 15 s; negative: none).
	KeepAlive time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Manager is the MCP servers of one process. Start it, Stop it.
type Manager struct {
	st   store.Store
	opts Options
	log  *slog.Logger
	http *http.Client

	// regMu orders this process's registry writes with the reconciling
	// reads, so a read taken before a write here cannot undo it.
	regMu   sync.Mutex
	mu      sync.Mutex
	conns   map[string]*conn
	version atomic.Uint64
	// callSeq numbers the tools/call requests sent directly (httpcall.go).
	callSeq atomic.Uint64

	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// New makes a Manager over st's mcp_servers rows.
func New(st store.Store, opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReconcileInterval <= 0 {
		opts.ReconcileInterval = 2 * time.Second
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 500 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 30 * time.Second
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 30 * time.Second
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 2 * time.Second
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	base := agent.NewHTTPClient(opts.Allow)
	m := &Manager{st: st, opts: opts, log: opts.Logger, conns: map[string]*conn{}}
	// No Timeout: it would cut the standalone SSE stream and long calls;
	// each call is bounded by its context. Redirects are not followed
	// (agent.NewHTTPClient): a redirect could point anywhere.
	// Every call of an MCP server's tools goes to one host: the base
	// transport keeps a connection for each call in flight (64 idle per
	// host; net/http's 2 made one call in four open a new TCP connection
	// under 8 concurrent callers).
	m.http = &http.Client{Transport: base.Transport, CheckRedirect: base.CheckRedirect}
	return m
}

// Start reads the registry, starts connecting to every server (without
// waiting for them) and keeps following the registry until Stop.
func (m *Manager) Start(ctx context.Context) error {
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.done = make(chan struct{})
	if err := m.reconcile(ctx); err != nil {
		m.cancel()
		close(m.done)
		return fmt.Errorf("MCP servers: %w", err)
	}
	go m.loop()
	return nil
}

// Stop closes every session and stops every stdio server (stdin closed,
// then SIGTERM, then SIGKILL, StopGrace apart). Calls in flight fail; the
// tool service leaves their calls to their deadlines. Safe to call twice.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		if m.cancel == nil {
			return
		}
		m.cancel()
		<-m.done
		m.mu.Lock()
		conns := m.conns
		m.conns = map[string]*conn{}
		m.mu.Unlock()
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() { defer wg.Done(); c.stop() }()
		}
		wg.Wait()
	})
}

func (m *Manager) loop() {
	defer close(m.done)
	t := time.NewTicker(m.opts.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		if err := m.reconcile(ctx); err != nil && m.ctx.Err() == nil {
			m.log.Warn("reading the MCP server registry", "err", err)
		}
		cancel()
	}
}

// reconcile makes this process's sessions match the registry: a new row
// starts a connection, a changed one restarts it, a deleted one stops it.
func (m *Manager) reconcile(ctx context.Context) error {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	rows, err := m.st.MCPServerList(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return nil
	}
	seen := map[string]bool{}
	for _, row := range rows {
		seen[row.Name] = true
		if c := m.conns[row.Name]; c != nil && c.row.UpdatedAt == row.UpdatedAt && string(c.row.Spec) == string(row.Spec) {
			continue
		} else if c != nil {
			go c.stop()
		}
		m.conns[row.Name] = m.startConn(row)
	}
	for name, c := range m.conns {
		if !seen[name] {
			delete(m.conns, name)
			go c.stop()
		}
	}
	return nil
}

// startConn starts following one registry row; m.mu is held.
func (m *Manager) startConn(row *store.MCPServerRow) *conn {
	c := newConn(m, row)
	spec, err := DecodeSpec(row.Spec)
	if err == nil {
		spec.Name = row.Name
		err = spec.Check()
	}
	if err != nil {
		// A row this version cannot use (written by a newer one, say): shown
		// as failed, never connected.
		c.fail(fmt.Errorf("the stored spec is not usable: %w", err))
		return c
	}
	c.spec = spec
	c.start()
	return c
}

func (m *Manager) conn(name string) *conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conns[name]
}

// MCPServer implements toolsvc.MCPSource.
func (m *Manager) MCPServer(name string) (*toolsvc.MCPServer, bool) {
	c := m.conn(name)
	if c == nil {
		return nil, false
	}
	return c.snapshot(), true
}

// MCPServers implements toolsvc.MCPSource.
func (m *Manager) MCPServers() []*toolsvc.MCPServer {
	m.mu.Lock()
	conns := make([]*conn, 0, len(m.conns))
	for _, c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].row.Name < conns[j].row.Name })
	out := make([]*toolsvc.MCPServer, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.snapshot())
	}
	return out
}

// ErrNotFound answers a name no MCP server has.
var ErrNotFound = respond.E(http.StatusNotFound, "mcp_server_not_found", "no such MCP server")

// Put registers spec (or replaces the server of that name) after checking
// it completely, the URL against the allowlist included, and connects to
// it here at once (other replicas within ReconcileInterval). It does not
// wait for the connection: GET shows how it goes.
func (m *Manager) Put(ctx context.Context, spec *Spec) (*ServerInfo, bool, error) {
	if err := spec.Check(); err != nil {
		return nil, false, err
	}
	if spec.Transport == TransportStdio {
		// A program this host cannot run is refused now, not accepted and
		// then retried for ever with backoff (found by an external audit).
		if _, err := exec.LookPath(spec.Command); err != nil {
			return nil, false, invalidSpec("command", fmt.Sprintf("%q cannot be run on this host: %v", spec.Command, errors.Unwrap(err)))
		}
	}
	if spec.Transport == TransportStreamableHTTP {
		if _, err := m.opts.Allow.ValidateEndpoint(ctx, spec.URL); err != nil {
			var ee *agent.EndpointError
			if errors.As(err, &ee) {
				return nil, false, respond.E(http.StatusBadRequest, ee.Code, "url: "+ee.Message)
			}
			return nil, false, err
		}
	}
	if spec.Policy.Decision == "" {
		spec.Policy.Decision = tool.DecisionAllow // shown as it applies
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, false, err
	}
	m.regMu.Lock()
	var row *store.MCPServerRow
	created := false
	// The change and its audit row commit together (DESIGN §15); never the
	// headers' or env's values, which may hold secrets.
	detail := map[string]any{"transport": spec.Transport, "url": spec.URL, "command": spec.Command}
	if old, gerr := m.st.MCPServerGet(ctx, spec.Name); gerr == nil && string(old.Spec) == string(raw) {
		// The same spec again (the config file at every start): nothing
		// changes, and no replica reconnects; only an administrator's PUT is
		// an action worth a row.
		row = old
		if audit.ActorFrom(ctx) != audit.Config {
			detail["unchanged"] = true
			err = m.st.InTx(ctx, func(tx store.Queries) error { return audit.Write(ctx, tx, audit.MCPServerPut, spec.Name, detail) })
		}
	} else {
		err = m.st.InTx(ctx, func(tx store.Queries) error {
			var err error
			if row, created, err = tx.MCPServerPut(ctx, &store.MCPServerPutParams{Name: spec.Name, Spec: raw, At: m.opts.Now().UnixMilli()}); err != nil {
				return err
			}
			detail["created"] = created
			return audit.Write(ctx, tx, audit.MCPServerPut, spec.Name, detail)
		})
	}
	if err == nil {
		m.apply(row)
	}
	m.regMu.Unlock()
	if err != nil {
		return nil, false, err
	}
	info, err := m.Get(ctx, spec.Name)
	return info, created, err
}

// apply starts (or restarts) the connection of a row just written here,
// unless the loop got there first.
func (m *Manager) apply(row *store.MCPServerRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil || m.ctx.Err() != nil {
		return
	}
	if c := m.conns[row.Name]; c != nil {
		if c.row.UpdatedAt >= row.UpdatedAt && string(c.row.Spec) == string(row.Spec) {
			return
		}
		go c.stop()
	}
	m.conns[row.Name] = m.startConn(row)
}

// Delete removes a server and stops its session here at once (its process,
// for a stdio server); its calls in flight here end then, unreachable (see
// CallMCP). Per-tool overrides in the tools table are kept.
func (m *Manager) Delete(ctx context.Context, name string) error {
	m.regMu.Lock()
	err := m.st.InTx(ctx, func(tx store.Queries) error {
		if err := tx.MCPServerDelete(ctx, name); err != nil {
			return err
		}
		return audit.Write(ctx, tx, audit.MCPServerDel, name, nil)
	})
	var c *conn
	if err == nil {
		m.mu.Lock()
		c = m.conns[name]
		delete(m.conns, name)
		m.mu.Unlock()
	}
	m.regMu.Unlock()
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if c != nil {
		c.stop()
	}
	return nil
}

// Get returns one server with this process's view of its session.
func (m *Manager) Get(ctx context.Context, name string) (*ServerInfo, error) {
	row, err := m.st.MCPServerGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return m.info(row), nil
}

// List returns every server, by name.
func (m *Manager) List(ctx context.Context) ([]*ServerInfo, error) {
	rows, err := m.st.MCPServerList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*ServerInfo, 0, len(rows))
	for _, row := range rows {
		out = append(out, m.info(row))
	}
	return out, nil
}
