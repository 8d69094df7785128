// Command mcp measures what agentplane adds to a call of an MCP server's
// tool (issue 12), on loopback, against the real `agentplane serve`
// binary running as its own process on SQLite and on PostgreSQL:
//
//	go run ./bench/mcp overhead
//
// In the same run, with the same agent and the same live runs, it times
// four calls: a tools/call made directly with the go-sdk client to an MCP
// server, the same tool invoked through agentplane (POST
// /v1/tools/bench@echo:invoke → succeeded, which the platform carries as a
// tools/call on its own session to the same server), and, as the
// reference the issue sets (an MCP call should add no more than a native
// server tool does), a POST to a plain HTTP tool and that tool invoked
// through agentplane. Both servers are in this process.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: go run ./bench/mcp <command> [flags]

commands:
  overhead   what agentplane adds to an MCP tool call (and to a native server tool call, for reference)

run "go run ./bench/mcp <command> -h" for its flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "overhead":
		err = overheadMain(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp:", err)
		os.Exit(1)
	}
}
