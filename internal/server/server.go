// Package server assembles agentplane from its parts and runs it until its
// context ends, then shuts down in order: refuse new runs, let in-flight
// runs finish (or fail them with a recorded reason), deliver the last
// events, close connections, flush the log, close the store.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/a2aremote"
	"github.com/agentplane/agentplane/internal/a2aserver"
	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/connlimit"
	"github.com/agentplane/agentplane/internal/console"
	"github.com/agentplane/agentplane/internal/demo"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/fakellm"
	"github.com/agentplane/agentplane/internal/httpapi"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/ingress"
	"github.com/agentplane/agentplane/internal/llmproxy"
	"github.com/agentplane/agentplane/internal/mcpclient"
	"github.com/agentplane/agentplane/internal/mcpserver"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/retention"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
	"github.com/agentplane/agentplane/internal/toolsvc"
	"github.com/agentplane/agentplane/internal/tracing"
)

// demoModel is the model the demo's built-in upstream serves.
const demoModel = "demo-llm"

// OpenStore opens the database named by AGENTPLANE_DB with the default
// PostgreSQL pool.
func OpenStore(ctx context.Context, dsn string) (store.Store, error) {
	return openStore(ctx, dsn, postgres.Options{})
}

func openStore(ctx context.Context, dsn string, pg postgres.Options) (store.Store, error) {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		return sqlite.Open(ctx, path)
	}
	return postgres.Open(ctx, dsn, pg)
}

// Run serves until ctx is cancelled. It prints the listening URL (and any
// generated keys) to out.
// minAdminKeyLen is the admin key's length below which a warning is logged.
const minAdminKeyLen = 16

func Run(ctx context.Context, cfg *config.Config, out io.Writer, logger *slog.Logger) error {
	st, err := openStore(ctx, cfg.DB, postgres.Options{MaxConns: cfg.DBMaxConns, MaxIdleTime: cfg.DBMaxIdleTime})
	if err != nil {
		return err
	}
	defer st.Close()

	userKeys := cfg.APIKeys
	var demoCreds demoCredentials
	if cfg.Demo {
		if demoCreds, err = keepDemoCredentials(ctx, st, cfg.AdminKey, cfg.APIKeys); err != nil {
			return err
		}
		cfg.AdminKey = demoCreds.adminKey
		userKeys = map[string]string{}
		for u, k := range cfg.APIKeys {
			userKeys[u] = k
		}
		userKeys[demoUser] = demoCreds.userKey
	}
	if cfg.AdminKey == "" {
		cfg.AdminKey = ids.Secret("adm_")
		cfg.AdminKeyGenerated = true
	} else if len(cfg.AdminKey) < minAdminKeyLen {
		// Any key is accepted (a short one suits a test or a laptop), but
		// an operator should hear that it can be guessed.
		logger.Warn("the admin key is short and easy to guess; use at least 16 random characters, or leave AGENTPLANE_ADMIN_KEY unset to have one generated", "length", len(cfg.AdminKey))
	}
	allowSpec := cfg.EndpointAllowlist
	if cfg.Demo {
		// The demo agent lives on loopback.
		allowSpec = strings.Trim(allowSpec+",127.0.0.1/32", ",")
	}
	allow, err := agent.ParseAllowlist(allowSpec)
	if err != nil {
		return fmt.Errorf("AGENTPLANE_ENDPOINT_ALLOWLIST: %w", err)
	}

	reg := metrics.New()
	log := eventlog.New(st, eventlog.Options{Logger: logger, Origin: cfg.InstanceID, Metrics: reg})
	defer log.Stop()
	if st.Dialect() == "postgres" {
		// Replicas share one database: follow their commits so a client
		// attached here sees runs driven elsewhere, live.
		lctx, stopListen := context.WithCancel(context.Background())
		listening := make(chan struct{})
		go func() { defer close(listening); postgres.Listen(lctx, cfg.DB, logger, log.Notified) }()
		defer func() { stopListen(); <-listening }()
	}
	keys := auth.New(cfg.AdminKey, userKeys, st)
	if limit := rateLimits(cfg.File.Limits, st, logger); limit != nil {
		keys.SetLimit(limit)
	}
	httpClient := agent.NewHTTPClient(allow)
	agentClient := &agent.Client{HTTP: httpClient, FirstByteTimeout: cfg.AgentFirstByteTimeout, IdleTimeout: cfg.AgentIdleTimeout}
	// Remote A2A agents (protocol "a2a", DESIGN §12) through the same
	// SSRF-checked client and timeouts.
	a2aClient := &a2aremote.Client{HTTP: httpClient, Allow: allow, FirstByteTimeout: cfg.AgentFirstByteTimeout, IdleTimeout: cfg.AgentIdleTimeout}
	invoker := &a2aremote.Invoker{Agents: agentClient, A2A: a2aClient}
	reg.CounterFunc("agentplane_events_appended_total", "Events committed to the log by this process.", func() float64 { ev, _ := log.Stats(); return float64(ev) })
	reg.CounterFunc("agentplane_event_commits_total", "Event log transactions committed by this process (events per commit shows batching).", func() float64 { _, c := log.Stats(); return float64(c) })
	bridge := newLLMBridge(keys, st, log, logger, reg)
	tools := toolsvc.New(log, toolsvc.Options{Logger: logger, HTTP: httpClient, Allow: allow, Metrics: reg, InstanceID: cfg.InstanceID, StaleAfter: staleAfter})
	runs := run.New(log, run.Options{InstanceID: cfg.InstanceID, Invoker: invoker, Logger: logger, Metrics: reg, Quiesce: bridge.Quiesce, OnEnd: tools.OnRunEnd, OnChildEnd: tools.OnChildEnd, MaxCallDepth: cfg.MaxCallDepth, StaleAfter: staleAfter,
		MaxOutputBytes: cfg.MaxRunOutputBytes, MaxOutputEvents: cfg.MaxRunEvents, MaxTranscriptBytes: cfg.MaxTranscriptBytes,
		MaxActiveRunsPerUser: cfg.File.Limits.MaxActiveRunsPerUser, MaxActiveRuns: cfg.File.Limits.MaxActiveRuns})
	tools.SetRuns(runs)
	bridge.invokeTraceparent = runs.InvokeTraceparent
	// MCP servers as tool sources: every process connects to every server,
	// since any process may dispatch a call (an approval decided here).
	mcps := mcpclient.New(st, mcpclient.Options{Logger: logger, Allow: allow})
	tools.SetMCP(mcps)
	if err := runs.Start(ctx); err != nil {
		return fmt.Errorf("start run manager: %w", err)
	}
	if err := tools.Start(ctx); err != nil {
		return fmt.Errorf("start tool service: %w", err)
	}
	defer tools.Stop()
	if err := mcps.Start(ctx); err != nil {
		return err
	}
	defer mcps.Stop()
	// What the config file changes is audited as its own actor.
	cfgCtx := audit.WithActor(ctx, audit.Config)
	// MCP servers before tools: the tools may override their tools.
	if err := loadConfigMCPServers(cfgCtx, mcps, &cfg.File.MCPServers); err != nil {
		return err
	}
	if err := loadConfigTools(cfgCtx, tools, &cfg.File.Tools); err != nil {
		return err
	}
	// Retention (DESIGN §15): the sweeper also finishes deletions cut short,
	// so it runs even with no retention period set.
	rc := cfg.File.Retention
	sweeper := retention.New(st, retention.Options{Days: rc.Days, Agents: rc.Agents, Interval: rc.SweepInterval, BatchSize: rc.BatchSize,
		Owner: cfg.InstanceID, Logger: logger, AgentSessionPrefix: run.AgentSessionPrefix, Deleted: runs.ForgetSession})
	sweeper.Start()
	defer sweeper.Stop()
	var shuttingDown atomic.Bool
	// Done when the HTTP server begins its shutdown: follow streams end
	// then rather than hold it up.
	closing, stopStreams := context.WithCancel(context.Background())
	defer stopStreams()
	api := &httpapi.API{St: st, Log: log, Keys: keys, Runs: runs, Tools: tools, MCP: mcps, Allow: allow, Logger: logger, Metrics: reg, Ready: func() bool { return !shuttingDown.Load() }, Closing: closing,
		AgentKeyGrace: time.Duration(cfg.File.Limits.AgentKeyGraceSeconds) * time.Second, Retention: sweeper,
		FetchCard: a2aClient.FetchCard}
	// Client presence across replicas (DESIGN §8): with a shared database
	// the ingress records which sessions it has connections for, and a
	// client tool dispatched by any replica asks those rows. On SQLite one
	// process owns the file, so its own connections are all there are. A
	// restart forgets the connections of the previous life first.
	shared := st.Dialect() == "postgres"
	if err := st.SessionClientsDeleteInstance(ctx, cfg.InstanceID); err != nil {
		return fmt.Errorf("drop stale client presence: %w", err)
	}
	if err := st.UserConnectionsDeleteInstance(ctx, cfg.InstanceID); err != nil {
		return fmt.Errorf("drop stale connection counts: %w", err)
	}
	wsOpts := ingress.Options{MaxFrameBytes: cfg.MaxFrameBytes, HelloTimeout: cfg.WSHelloTimeout, MaxPerUser: cfg.MaxWSPerUser, Logger: logger, Tools: tools}
	var userConns *userConnections
	if shared {
		wsOpts.Presence = recordPresence(st, cfg.InstanceID)
		if cfg.MaxWSPerUser > 0 {
			// The per-user cap holds across replicas (DESIGN §15).
			userConns = &userConnections{st: st, instanceID: cfg.InstanceID, max: cfg.MaxWSPerUser, log: logger}
			wsOpts.UserConnections = userConns
		}
	}
	ws := ingress.New(keys, runs, log, wsOpts)
	tools.SetClientConnected(clientPresence(ws, shared))
	reg.GaugeFunc("agentplane_ws_connections", "Open client WebSocket connections.", func() float64 { return float64(ws.Connections()) })

	llmCfg, err := llmConfig(cfg)
	if err != nil {
		return err
	}
	var demoLLM *fakellm.Running
	if cfg.Demo && len(llmCfg.Upstreams) == 0 {
		// The demo's "LLM": a local server speaking the OpenAI wire format,
		// so the demo agent calls a model through the proxy with no key.
		if demoLLM, err = fakellm.Start("127.0.0.1:0", fakellm.Options{Models: []string{demoModel}, ChunkDelay: 40 * time.Millisecond}); err != nil {
			return fmt.Errorf("demo LLM: %w", err)
		}
		defer demoLLM.Close()
		llmCfg.Upstreams = []llmproxy.Upstream{{Name: "demo", BaseURL: demoLLM.URL}}
		if llmCfg.Prices == nil {
			llmCfg.Prices = map[string]llmproxy.Price{demoModel: {Input: 0.5, CachedInput: 0.25, Output: 1.5}}
		}
	}
	proxy, err := llmproxy.New(llmCfg, proxyStoreErrors(bridge.authenticate), bridge)
	if err != nil {
		return fmt.Errorf("llm proxy: %w", err)
	}
	defer proxy.Close()

	mux := http.NewServeMux()
	api.Routes(mux)
	mcpServe := mcpserver.New(mcpserver.Options{Keys: keys, Tools: tools, Logger: logger})
	defer mcpServe.Stop()
	if cfg.Role != "ingress" {
		proxy.Routes(mux)
		mcpServe.Routes(mux)
	}
	if cfg.Role != "orchestrator" {
		mux.Handle("GET /v1/ws", ws)
		// Every agent registered with a2a:true as an A2A agent (DESIGN
		// §12): client-facing, like the WebSocket.
		a2aserver.New(a2aserver.Options{Runs: runs, Log: log, Keys: keys, Tools: tools, Hold: ws.Hold, Logger: logger}).Routes(mux)
		ui := console.Handler()
		mux.Handle("GET /{$}", ui)
		mux.Handle("GET /console", ui)
		mux.Handle("GET /console/", ui)
		mux.Handle("GET /static/", ui)
	}

	if cfg.PprofAddr != "" {
		stopPprof, err := servePprof(cfg.PprofAddr, logger)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	tcp, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	base := "http://" + tcp.Addr().String()
	ln := connlimit.Listen(tcp, connlimit.Limits{Total: cfg.MaxConnections, Unauthenticated: cfg.MaxUnauthenticatedConnections})
	reg.GaugeFunc("agentplane_connections_open", "Open network connections (HTTP and WebSocket).", func() float64 { n, _, _, _ := ln.Stats(); return float64(n) })
	reg.GaugeFunc("agentplane_connections_unauthenticated", "Open connections that have not presented a valid key yet.", func() float64 { _, n, _, _ := ln.Stats(); return float64(n) })
	reg.CounterFunc("agentplane_connections_evicted_total", "Unauthenticated connections closed to make room (--max-unauthenticated-connections).", func() float64 { _, _, n, _ := ln.Stats(); return float64(n) })
	reg.CounterFunc("agentplane_connections_refused_total", "Connections refused at --max-connections.", func() float64 { _, _, _, n := ln.Stats(); return float64(n) })
	// No WriteTimeout or ReadTimeout: they would cut SSE and WebSocket
	// streams. Each stream bounds its own writes, and bodyDeadline bounds
	// reading request bodies.
	srv := &http.Server{Handler: bodyDeadline(cfg.BodyReadTimeout, tracing.Middleware(httpapi.Handler(mux))), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ConnContext: connlimit.ConnContext, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(stopStreams)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	prb := &prober{st: st, client: agentClient, a2a: a2aClient, interval: cfg.HealthInterval, log: logger}

	for _, spec := range cfg.File.Agents {
		resp, err := api.Register(cfgCtx, &httpapi.RegisterRequest{AgentID: spec.AgentID, Name: spec.Name, Description: spec.Description, Endpoint: spec.Endpoint,
			Capabilities: spec.Capabilities, LinkedAgents: spec.LinkedAgents, SubAgentEcho: spec.SubAgentEcho, A2A: spec.A2A, Protocol: spec.Protocol})
		if err != nil {
			return fmt.Errorf("config file agent %s: %w", spec.AgentID, err)
		}
		if resp.AgentAPIKey != "" {
			fmt.Fprintf(out, "registered agent %s from the config file; its key (shown once): %s\n", spec.AgentID, resp.AgentAPIKey)
		}
	}

	var demoAgent *demo.Agent
	var demoTeam *demo.Team
	var demoCurrency *demo.Currency
	if cfg.Demo {
		demoAgent, err = demo.Listen()
		if err != nil {
			return err
		}
		defer demoAgent.Stop(context.Background())
		// Registered through the public API, exactly as an external agent would be.
		key, err := registerOverHTTP(ctx, base, cfg.AdminKey, demo.AgentID, demoAgent.URL)
		if err != nil {
			return fmt.Errorf("register demo agent: %w", err)
		}
		// The demo's tools, registered over the admin API as an operator would.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = demo.RegisterTools(rctx, base, cfg.AdminKey, demoAgent.ToolsURL)
		if err == nil {
			err = demo.RegisterMCPServer(rctx, base, cfg.AdminKey, demoAgent.MCPURL)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("register demo tools: %w", err)
		}
		// The built-in upstream serves demo-llm (README, quick start); a real
		// upstream gets a small model unless AGENTPLANE_DEMO_MODEL names one.
		model := os.Getenv("AGENTPLANE_DEMO_MODEL")
		if model == "" {
			model = demoModel
			if demoLLM == nil {
				model = "gpt-4o-mini"
			}
		}
		demoAgent.Serve(base, key, model)
		// A remote A2A agent (issue 10), linked to the planner below.
		if demoCurrency, err = demo.ServeCurrency(); err != nil {
			return err
		}
		defer demoCurrency.Stop(context.Background())
		if err := registerCurrency(ctx, base, cfg.AdminKey, demoCurrency); err != nil {
			return fmt.Errorf("register the demo A2A agent: %w", err)
		}
		// The multi-agent part: a planner calling two workers (issue 9).
		if demoTeam, err = demo.ListenTeam(); err != nil {
			return err
		}
		defer demoTeam.Stop(context.Background())
		teamKeys, err := registerTeam(ctx, base, cfg.AdminKey, demoTeam)
		if err != nil {
			return fmt.Errorf("register demo team: %w", err)
		}
		demoTeam.Serve(base, teamKeys, model)
	}
	prb.Start()
	defer prb.Stop()

	fmt.Fprintf(out, "agentplane listening on %s (store %s, role %s)\n", base, st.Dialect(), cfg.Role)
	if cfg.AdminKeyGenerated {
		fmt.Fprintf(out, "admin key (generated; set AGENTPLANE_ADMIN_KEY to keep one): %s\n", cfg.AdminKey)
	}
	if cfg.Demo {
		where := storeWhere(cfg.DB)
		if demoCreds.adminStored {
			fmt.Fprintf(out, "admin key: %s (kept in %s, table settings, for the next start; AGENTPLANE_ADMIN_KEY overrides it)\n", cfg.AdminKey, where)
		}
		fmt.Fprintf(out, "demo agent %q serving at %s\n", demo.AgentID, demoAgent.URL)
		for _, m := range demoTeam.Members {
			links := ""
			if len(m.LinkedAgents) > 0 {
				links = " (calls " + strings.Join(m.LinkedAgents, ", ") + ")"
			}
			fmt.Fprintf(out, "demo agent %q serving at %s%s\n", m.AgentID, m.URL, links)
		}
		fmt.Fprintf(out, "demo A2A agent %q (a remote agent, protocol a2a) serving at %s\n", demo.CurrencyID, demoCurrency.URL)
		fmt.Fprintf(out, "the demo agent over A2A: %s/a2a/%s/.well-known/agent-card.json\n", base, demo.AgentID)
		if demoCreds.userStored {
			fmt.Fprintf(out, "demo user key: %s (kept in %s, table settings; AGENTPLANE_API_KEYS=demo:<key> overrides it)\n", demoCreds.userKey, where)
		} else {
			fmt.Fprintf(out, "demo user key: %s (from AGENTPLANE_API_KEYS)\n", demoCreds.userKey)
		}
		fmt.Fprintf(out, "open the chat: %s/#user=%s&key=%s&agent=%s\n", base, demoUser, demoCreds.userKey, demo.AgentID)
		fmt.Fprintf(out, "or the planner: %s/#user=%s&key=%s&agent=%s\n", base, demoUser, demoCreds.userKey, demo.PlannerID)
		fmt.Fprintf(out, "open the console: %s/console (log in with the admin key, or %s:<demo user key>)\n", base, demoUser)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "grace", cfg.ShutdownGrace)
	shuttingDown.Store(true)
	grace, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	runs.Shutdown(grace)
	cancel()
	final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws.Shutdown(final)
	mcpServe.Stop() // its waits would hold the shutdown of their connections
	if err := srv.Shutdown(final); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("http shutdown", "err", err)
	}
	if err := st.SessionClientsDeleteInstance(final, cfg.InstanceID); err != nil {
		logger.Warn("drop client presence", "err", err)
	}
	if userConns != nil {
		userConns.stopped.Store(true)
	}
	if err := st.UserConnectionsDeleteInstance(final, cfg.InstanceID); err != nil {
		logger.Warn("drop connection counts", "err", err)
	}
	prb.Stop()
	tools.Stop()
	mcps.Stop()
	proxy.Close()
	log.Stop() // after the proxy: its write-behind events are flushed here
	fmt.Fprintln(out, "agentplane stopped")
	return nil
}
