package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
	"github.com/agentplane/agentplane/internal/toolsvc"
	"github.com/agentplane/agentplane/internal/tracing"
)

// Session states (ServerInfo.Status).
const (
	// StatusConnected: a session is up and its tools are listed.
	StatusConnected = "connected"
	// StatusConnecting: no session yet, or the session was lost and a new
	// one is being made.
	StatusConnecting = "connecting"
	// StatusFailed: the last attempt failed; the next comes after a backoff
	// (NextAttemptAt), unless the spec itself is unusable.
	StatusFailed = "failed"
)

// protocolVersion is the MCP version offered. Naming it skips the SDK's
// server/discover probe of a newer version (one round trip per connect)
// that servers of this generation answer with an error; a server may
// still negotiate an older version.
const protocolVersion = "2025-11-25"

// stableAfter is how long a session must have lived for the backoff to
// start again from its minimum: a server that dies right after starting
// is restarted ever more slowly, not in a tight loop.
const stableAfter = 30 * time.Second

// conn follows one MCP server for this process: its session, its tools,
// and the goroutine that (re)connects.
type conn struct {
	m    *Manager
	row  *store.MCPServerRow
	spec *Spec // nil when the stored spec is unusable
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	relist chan struct{}

	mu              sync.Mutex
	status          string
	session         *mcp.ClientSession
	tools           []tool.MCPListedTool
	skipped         []SkippedTool
	version         uint64
	lastError       string
	lastConnectedAt int64
	nextAttemptAt   int64
	protocol        string
	serverInfo      *mcp.Implementation

	// progress holds the running calls' progress handlers by token.
	// A mutex and a map, not a sync.Map: every call adds a new key and
	// removes it, the pattern a sync.Map handles worst.
	progressMu sync.Mutex
	progress   map[string]func(progress, total float64, message string)
	// hc is a Streamable HTTP server's client for its sessions' transport;
	// direct is the same without headerTransport, for the direct
	// tools/call requests (httpcall.go), which carry the spec's headers
	// and trace context from the start instead of being cloned to add
	// them. Both share the manager's transport, so its connections and
	// SSRF-guarded dialer.
	hc, direct *http.Client
}

// SkippedTool is a tool a server lists that the platform cannot offer.
type SkippedTool struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func newConn(m *Manager, row *store.MCPServerRow) *conn {
	c := &conn{m: m, row: row, log: m.log.With("mcp_server", row.Name), status: StatusConnecting, done: make(chan struct{}), relist: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithCancel(m.ctx)
	c.version = m.version.Add(1)
	return c
}

// fail marks a conn that will never connect (its spec is unusable).
func (c *conn) fail(err error) {
	c.mu.Lock()
	c.status, c.lastError = StatusFailed, err.Error()
	c.mu.Unlock()
	c.log.Error("MCP server not started", "err", err)
	close(c.done)
}

func (c *conn) start() { go c.run() }

// stop ends the session (and a stdio server's process) and waits for it.
func (c *conn) stop() {
	c.cancel()
	<-c.done
}

// run connects, serves the session until it ends, and connects again
// with backoff, until stopped.
func (c *conn) run() {
	defer close(c.done)
	backoff := c.m.opts.BackoffMin
	for c.ctx.Err() == nil {
		c.setStatus(StatusConnecting, "")
		cs, cleanup, err := c.connect()
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			c.log.Warn("MCP server connect failed", "err", err, "retry_in", backoff)
			c.mu.Lock()
			c.status, c.lastError = StatusFailed, err.Error()
			c.nextAttemptAt = c.m.opts.Now().Add(backoff).UnixMilli()
			c.mu.Unlock()
			if !sleep(c.ctx, backoff) {
				return
			}
			backoff = min(backoff*2, c.m.opts.BackoffMax)
			continue
		}
		began := time.Now()
		err = c.serve(cs)
		msg := "the session ended"
		if err != nil {
			msg += ": " + err.Error()
		}
		// Unpublished and explained at once: no call may find the session
		// gone and the status still connected.
		c.mu.Lock()
		c.session, c.status, c.lastError = nil, StatusConnecting, msg
		c.mu.Unlock()
		cs.Close()
		cleanup()
		if c.ctx.Err() != nil {
			return
		}
		if time.Since(began) > stableAfter {
			backoff = c.m.opts.BackoffMin
		}
		c.log.Warn("MCP server connection lost; reconnecting", "err", msg, "retry_in", backoff)
		if !sleep(c.ctx, backoff) {
			return
		}
		backoff = min(backoff*2, c.m.opts.BackoffMax)
	}
}

// serve publishes a new session, keeps its tool list fresh and returns
// when the session ends (or the conn is stopped).
func (c *conn) serve(cs *mcp.ClientSession) error {
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	for {
		select {
		case <-c.ctx.Done():
			return nil
		case err := <-ended:
			return err
		case <-c.relist:
			// list_changed often comes in bursts (server-everything sends two
			// right after initialize): one listing answers them all.
			if !sleep(c.ctx, 50*time.Millisecond) {
				return nil
			}
			select {
			case <-c.relist:
			default:
			}
			if err := c.listTools(cs); err != nil {
				c.log.Warn("MCP server tools/list failed", "err", err)
			}
		}
	}
}

// connect opens a session, lists its tools and publishes both.
func (c *conn) connect() (*mcp.ClientSession, func(), error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.opts.ConnectTimeout)
	defer cancel()
	keepAlive := c.m.opts.KeepAlive
	if keepAlive < 0 {
		keepAlive = 0
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agentplane", Version: "1"}, &mcp.ClientOptions{
		KeepAlive:              keepAlive,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.toolsChanged() },
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if r.Params != nil {
				c.notifyProgress(fmt.Sprint(r.Params.ProgressToken), r.Params.Progress, r.Params.Total, r.Params.Message)
			}
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			if r.Params != nil {
				c.log.Debug("MCP server log message", "level", r.Params.Level, "logger", r.Params.Logger, "data", r.Params.Data)
			}
		},
	})
	var transport mcp.Transport
	cleanup := func() {}
	switch c.spec.Transport {
	case TransportStreamableHTTP:
		c.mu.Lock()
		if c.hc == nil {
			c.hc = &http.Client{Transport: headerTransport{base: c.m.http.Transport, headers: c.spec.Headers}, CheckRedirect: c.m.http.CheckRedirect}
			c.direct = &http.Client{Transport: c.m.http.Transport, CheckRedirect: c.m.http.CheckRedirect}
		}
		hc := c.hc
		c.mu.Unlock()
		transport = &mcp.StreamableClientTransport{
			Endpoint:   c.spec.URL,
			HTTPClient: hc,
			// Fail at once when the server's stream breaks: this conn
			// reconnects itself, with its own backoff and status.
			MaxRetries: -1,
		}
	case TransportStdio:
		cmd, done := c.command()
		cleanup = done
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: c.m.opts.StopGrace}
	}
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := c.listTools(cs); err != nil {
		cs.Close()
		cleanup()
		return nil, nil, fmt.Errorf("tools/list: %w", err)
	}
	res := cs.InitializeResult()
	c.mu.Lock()
	c.session, c.status, c.lastError, c.nextAttemptAt = cs, StatusConnected, "", 0
	c.lastConnectedAt = c.m.opts.Now().UnixMilli()
	if res != nil {
		c.protocol, c.serverInfo = res.ProtocolVersion, res.ServerInfo
	}
	c.mu.Unlock()
	c.log.Info("MCP server connected", "protocol", c.protocol, "tools", len(c.toolsNow()))
	return cs, cleanup, nil
}

// listTools lists every page of the server's tools, keeps those the
// platform can offer and publishes them if they changed.
func (c *conn) listTools(cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.opts.ConnectTimeout)
	defer cancel()
	var tools []tool.MCPListedTool
	var skipped []SkippedTool
	defaults := c.spec.Defaults()
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		if err := tool.CheckMCPToolName(t.Name); err != nil {
			skipped = append(skipped, SkippedTool{Name: t.Name, Reason: err.(*tool.ValidationError).Message})
			continue
		}
		listed := tool.MCPListedTool{Name: t.Name, Description: t.Description}
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				skipped = append(skipped, SkippedTool{Name: t.Name, Reason: "input schema: " + err.Error()})
				continue
			}
			listed.InputSchema = b
		}
		// Everything a call could trip over is checked now, once per listing.
		if _, err := tool.Compile(tool.MCPDefinition(c.spec.Name, defaults, listed, nil)); err != nil {
			var ve *tool.ValidationError
			reason := err.Error()
			if errors.As(err, &ve) {
				reason = ve.Field + ": " + ve.Message
			}
			skipped = append(skipped, SkippedTool{Name: t.Name, Reason: reason})
			continue
		}
		tools = append(tools, listed)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !reflect.DeepEqual(tools, c.tools) || !reflect.DeepEqual(skipped, c.skipped) {
		c.tools, c.skipped = tools, skipped
		c.version = c.m.version.Add(1)
		for _, s := range skipped {
			c.log.Warn("MCP server tool not offered", "tool", s.Name, "reason", s.Reason)
		}
	}
	return nil
}

func (c *conn) setStatus(status, lastError string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = status
	if lastError != "" {
		c.lastError = lastError
	}
	c.nextAttemptAt = 0
}

func (c *conn) toolsNow() []tool.MCPListedTool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools
}

// toolsChanged asks serve to list the server's tools again.
func (c *conn) toolsChanged() {
	select {
	case c.relist <- struct{}{}:
	default:
	}
}

// notifyProgress hands a progress notification to the call that asked
// for it with token, if it is still running.
func (c *conn) notifyProgress(token string, progress, total float64, message string) {
	c.progressMu.Lock()
	fn := c.progress[token]
	c.progressMu.Unlock()
	if fn != nil {
		fn(progress, total, message)
	}
}

// onProgress registers fn for the progress of the call with token until
// the returned func is called.
func (c *conn) onProgress(token string, fn func(progress, total float64, message string)) (remove func()) {
	c.progressMu.Lock()
	if c.progress == nil {
		c.progress = map[string]func(float64, float64, string){}
	}
	c.progress[token] = fn
	c.progressMu.Unlock()
	return func() {
		c.progressMu.Lock()
		delete(c.progress, token)
		c.progressMu.Unlock()
	}
}

// currentSession is the live session and, for a Streamable HTTP server,
// the HTTP client of its direct calls; or nil and why not.
func (c *conn) currentSession() (*mcp.ClientSession, *http.Client, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != nil {
		return c.session, c.direct, ""
	}
	why := "it is " + c.status
	if c.lastError != "" {
		why += ": " + c.lastError
	}
	return nil, nil, why
}

// snapshot is the conn as the tool service sees it.
func (c *conn) snapshot() *toolsvc.MCPServer {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &toolsvc.MCPServer{
		Name: c.row.Name, Tools: c.tools, Version: c.version, Connected: c.session != nil,
		LastError: c.lastError, CreatedAt: c.row.CreatedAt, UpdatedAt: c.row.UpdatedAt,
	}
	if c.spec != nil {
		s.Defaults = c.spec.Defaults()
	}
	return s
}

// headerTransport adds a server entry's headers to every request (the SDK's
// transport has no headers of its own), and the W3C traceparent of the
// request's span: a tools/call is sent with the context of the tool call's
// execution span, so the MCP server's own spans join the run's trace as a
// server tool's do (DESIGN §14).
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	traced := trace.SpanContextFromContext(r.Context()).IsValid()
	if len(h.headers) > 0 || traced {
		r = r.Clone(r.Context())
		setHeaders(r.Context(), r.Header, h.headers)
	}
	return h.base.RoundTrip(r)
}

// setHeaders sets a server entry's headers and ctx's trace context on h.
func setHeaders(ctx context.Context, h http.Header, headers map[string]string) {
	for k, v := range headers {
		h.Set(k, v)
	}
	tracing.Inject(ctx, h) // nothing without a span
}

// sleep waits d or until ctx ends, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
