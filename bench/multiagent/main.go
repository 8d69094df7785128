// Command multiagent measures agents calling agents through agentplane
// (issue 9) on loopback, against the real `agentplane serve` binary running
// as its own process on SQLite and on PostgreSQL:
//
//	go run ./bench/multiagent hop      # added latency of one hop: caller's invoke → first child delta at the caller, vs a root run's first delta at a WebSocket client
//	go run ./bench/multiagent fanout   # a parent fanning out 50 concurrent children: every event delivered, server memory bounded
//
// The agents are real HTTP servers in this process speaking the platform's
// SSE contract; the bench plays the calling agent's code (it POSTs
// /v1/agents/{agent_id}:invoke with the caller's key and run, as the SDKs
// do) and the user's WebSocket clients.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: go run ./bench/multiagent <command> [flags]

commands:
  hop      added latency of one hop (caller's invoke → first child delta at the caller) over a root run's first delta at a WebSocket client
  fanout   a parent fanning out concurrent children (default 50): every event delivered, server RSS sampled

run "go run ./bench/multiagent <command> -h" for its flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "hop":
		err = hopMain(args)
	case "fanout":
		err = fanoutMain(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "multiagent:", err)
		os.Exit(1)
	}
}
