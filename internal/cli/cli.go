// Package cli is the agentplane command line: `agentplane serve` and help.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentplane/agentplane/internal/config"
	"github.com/agentplane/agentplane/internal/server"
)

const usage = `agentplane — a control plane for AI agents

usage:
  agentplane serve [flags]     run the server (agentplane serve --help lists flags)
  agentplane help              show this text

quick start:
  agentplane serve --demo      embedded SQLite, a demo agent and a chat page
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
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
	return 2
}

func serve(args []string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(args, os.Getenv, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agentplane:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, cfg, stdout, logger); err != nil {
		fmt.Fprintln(stderr, "agentplane:", err)
		return 1
	}
	return 0
}
