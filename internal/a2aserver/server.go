// Package a2aserver serves every agent registered with a2a:true as an A2A
// agent (DESIGN §12): a public agent card at
// GET /a2a/{agent_id}/.well-known/agent-card.json and JSON-RPC (protocol
// v1.0 and v0.3 on the same URL, blocking and streaming) at
// POST /a2a/{agent_id} with a user key.
//
// It translates the A2A protocol into calls of the run manager and the tool
// service, the way package ingress translates WebSocket frames, and reads
// what it answers from the event log. The wire protocol (JSON-RPC, SSE,
// the v0.3 shapes) is github.com/a2aproject/a2a-go/v2's; the task state
// machine is not: the library's RequestHandler is implemented here over
// the runs, so a task is never state of its own that could disagree with
// the log. The mapping:
//
//   - contextId is the session id (a message without one starts a session);
//   - taskId is the intention id: a task is the chain of root runs of one
//     intention (the first run and the runs that resumed it);
//   - a task's state is its latest run's: RUNNING → working, a run waiting
//     for an approval or a client tool → input-required (with a data part
//     saying what to answer), DONE → completed, FAILED → failed,
//     CANCELLED → canceled, INPUT_REQUIRED → input-required (the question);
//   - streaming: the run's deltas are artifact-update chunks appended to
//     one artifact per run (artifactId = the run id), its agent states are
//     working status updates, and the stream ends with the run's end or
//     when it waits for input.
//
// Every replica answers every task: the state is in the store and the log,
// followed across replicas like a WebSocket client's sessions.
package a2aserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/toolsvc"
)

// DefaultMaxBodyBytes bounds one JSON-RPC request.
const DefaultMaxBodyBytes = 1 << 20

// keepAlive is how often a quiet stream gets an SSE comment.
const keepAlive = 15 * time.Second

// Tools is the tool-call side a task needs (toolsvc.Service): answering
// approvals and client tools sent as data parts, and listing what a
// session waits for.
type Tools interface {
	SubmitClientResult(ctx context.Context, r toolsvc.ClientResult) (*toolsvc.CallView, error)
	Decide(ctx context.Context, p toolsvc.DecideParams) (*store.Approval, error)
	Pending(ctx context.Context, sessionID string) ([]map[string]any, error)
}

// Options configure a Server.
type Options struct {
	Runs *run.Manager
	Log  *eventlog.Log
	Keys *auth.Keys
	// Tools answers approvals and client tools; nil refuses such answers.
	Tools Tools
	// Hold, when set, counts a request following a session as a client of
	// it until release (ingress.Server.Hold), so a client tool
	// requested while an A2A stream is attached is dispatched to it rather
	// than failing client_offline. recorded waits (bounded) until other
	// processes can see the hold.
	Hold func(sessionID string) (recorded func(context.Context), release func())
	// MaxBodyBytes bounds a request (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	Logger       *slog.Logger
}

// Server serves the A2A routes.
type Server struct {
	opts Options
	st   store.Store
	v1   http.Handler
	v03  http.Handler
	card http.Handler
}

// New builds the server.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	s := &Server{opts: opts, st: opts.Log.Store()}
	h := &handler{s: s}
	s.v1 = a2asrv.NewJSONRPCHandler(h, a2asrv.WithTransportKeepAlive(keepAlive))
	s.v03 = a2av0.NewJSONRPCHandler(h, a2asrv.WithTransportKeepAlive(keepAlive))
	// The v0.3 producer serves the union of the v1.0 and v0.3 card shapes,
	// so clients of either version read it (unionCard mends its v1.0
	// security schemes).
	s.card = a2asrv.NewAgentCardHandler(unionCard{a2av0.NewAgentCardProducer(a2asrv.AgentCardProducerFn(func(ctx context.Context) (*a2a.AgentCard, error) {
		c := callFrom(ctx)
		return Card(c.base, c.agent), nil
	}))})
	return s
}

// Routes registers the A2A routes on mux.
func (s *Server) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /a2a/{agent_id}/.well-known/agent-card.json", s.serveCard)
	mux.HandleFunc("POST /a2a/{agent_id}", s.serveRPC)
}

// call is what every handler needs about the request, carried in its ctx.
type call struct {
	agent  *store.Agent
	userID string
	base   string // scheme://host of this server as the client reached it
}

type callKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return &call{agent: &store.Agent{}}
	}
	return c
}

var errNoA2AAgent = respond.E(http.StatusNotFound, "agent_not_found", "no such A2A agent (the agent does not exist or is not registered with a2a:true)")

// servedAgent returns the agent at {agent_id} if it is served over A2A.
func (s *Server) servedAgent(r *http.Request) (*store.Agent, error) {
	ag, err := s.opts.Runs.Agent(r.Context(), r.PathValue("agent_id"))
	if err == nil && !ag.A2A {
		// Registered with a2a:true a moment ago, maybe, on another replica.
		ag, err = s.opts.Runs.AgentFresh(r.Context(), r.PathValue("agent_id"))
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && !ag.A2A) {
		return nil, errNoA2AAgent
	}
	return ag, err
}

// serveCard answers the public card (no key: DESIGN §2.6 lists agent cards
// among what is open; the card holds no secrets).
func (s *Server) serveCard(w http.ResponseWriter, r *http.Request) {
	ag, err := s.servedAgent(r)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	s.card.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, &call{agent: ag, base: baseURL(r)})))
}

// serveRPC authenticates a user key, then hands the request to the v1.0 or
// the v0.3 JSON-RPC binding by its method name.
func (s *Server) serveRPC(w http.ResponseWriter, r *http.Request) {
	p, err := s.opts.Keys.Request(r)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	if p.Kind != auth.User {
		respond.Err(w, r, respond.E(http.StatusForbidden, "forbidden", "A2A calls are made with a user key: tasks belong to a user's sessions"))
		return
	}
	ag, err := s.servedAgent(r)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	body, err := respond.ReadBody(w, r, s.opts.MaxBodyBytes)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ctx := context.WithValue(r.Context(), callKey{}, &call{agent: ag, userID: p.UserID, base: baseURL(r)})
	if isV1(r, body) {
		s.v1.ServeHTTP(w, r.WithContext(ctx))
		return
	}
	if r.Header.Get(a2a.SvcParamVersion) == "" {
		w = v03Writer{w} // a v0.3 library's client: see v03Writer
	}
	s.v03.ServeHTTP(w, r.WithContext(ctx))
}

// isV1 tells the bindings apart as @a2a-js/sdk does: v1.0 method names are
// PascalCase ("SendMessage"), v0.3 ones have a slash ("message/send").
// Without a method (not JSON-RPC at all) the A2A-Version header decides; a
// v0.3 client sends none.
func isV1(r *http.Request, body []byte) bool {
	var probe struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &probe) == nil && probe.Method != "" {
		return !strings.Contains(probe.Method, "/")
	}
	v := r.Header.Get(a2a.SvcParamVersion)
	return v != "" && !strings.HasPrefix(v, "0.")
}

// baseURL is this server as the client reached it, for the card's URLs.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
