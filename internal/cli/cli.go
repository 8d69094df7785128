// Package cli is the agentplane command line: `agentplane serve`, and the
// operator commands (agents, tools, approvals, sessions, runs), which speak
// only the public HTTP API of a running server (docs/API.md).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/server"
	"github.com/agentplane/agentplane/internal/tracing"
)

const usage = `agentplane — a control plane for AI agents

usage:
  agentplane serve [flags]     run the server (agentplane serve --help lists flags)
  agentplane help              show this text

operator commands (against a running server):
  agentplane agents list
  agentplane agents register --id ID --endpoint URL [--name N] [--capabilities a,b] [--linked a,b] [--rotate-key]
  agentplane tools list
  agentplane tools put FILE|-          a definition or a list, JSON or YAML
  agentplane approvals list [--status PENDING|…|all] [--session ID]
  agentplane approvals decide APPROVAL_ID approve|reject [--reason TEXT]
  agentplane sessions list [--user U] [--agent A] [--status active|ended] [--q PREFIX] [--since 24h] [--limit N]
  agentplane sessions tail SESSION [--after-seq N]   follow its events live
  agentplane runs list [--session S] [--user U] [--agent A] [--status S] [--root] [--parent RUN]
  agentplane runs tree RUN

  every operator command takes --url (env AGENTPLANE_URL, default http://127.0.0.1:8080),
  --key (env AGENTPLANE_KEY, else AGENTPLANE_ADMIN_KEY) and --json

quick start:
  agentplane serve --demo      embedded SQLite, a demo agent, a chat page and the console
`

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "agents", "tools", "approvals", "sessions", "runs":
		return operator(args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
	return 2
}

// usageErr is a command used wrongly: exit code 2 with the right form.
type usageErr struct{ text string }

func (e *usageErr) Error() string { return "usage: " + e.text }

func usageError(text string) error { return &usageErr{text} }

// operator runs one operator command until it is done or interrupted.
func operator(cmd string, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := newClient(stdout, stderr)
	run := map[string]func(context.Context, []string) error{
		"agents": c.agents, "tools": c.tools, "approvals": c.approvals, "sessions": c.sessions, "runs": c.runs,
	}[cmd]
	err := run(ctx, args)
	var ue *usageErr
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, ue.Error())
		return 2
	}
	fmt.Fprintln(stderr, "agentplane:", err)
	return 1
}

func serve(args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, os.Getenv, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agentplane:", err)
		return 2
	}
	logger := NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdownTracing, err := tracing.Setup(ctx, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "agentplane: tracing:", err)
		return 2
	}
	code := 0
	if err := server.Run(ctx, cfg, stdout, logger); err != nil {
		fmt.Fprintln(stderr, "agentplane:", err)
		code = 1
	}
	// Flush the spans of the last runs before the process ends.
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdownTracing(flushCtx); err != nil {
		logger.Warn("flush traces", "err", err)
	}
	return code
}

// NewLogger is the server's logger: text or JSON lines at level, each
// logged with a context carrying the trace_id and span_id of its span.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // validated by config
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(tracing.LogHandler{Handler: h})
}
