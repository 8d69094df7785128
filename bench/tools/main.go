// Command tools measures agentplane's tool calls (issue 4) on loopback,
// against the real `agentplane serve` binary running as its own process on
// SQLite and on PostgreSQL, each next to a baseline measured in the same
// run:
//
//	go run ./bench/tools overhead   # invoke → succeeded of a fast server tool vs POSTing the tool directly
//	go run ./bench/tools wakeup     # approval decision → the pending :wait returns vs a bare long-poll server
//	go run ./bench/tools waits      # 5,000 pending :wait long-polls: memory, vs as many idle keep-alive connections
//
// Each mode starts a tiny SSE agent in this process that holds its runs
// open (so the tools are called in live runs, with a client connected) and
// a fast server tool (an HTTP server in this process). bare-server is the
// wakeup baseline's server process; the tool starts it itself.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: go run ./bench/tools <command> [flags]

commands:
  overhead      platform overhead of a fast server tool call, invoke → succeeded
  wakeup        approval decision → the agent's pending :wait returns
  waits         memory held by 5,000 concurrent pending :wait long-polls
  bare-server   (internal) the wakeup baseline: a bare net/http long-poll server

run "go run ./bench/tools <command> -h" for its flags.
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
	case "wakeup":
		err = wakeupMain(args)
	case "waits":
		err = waitsMain(args)
	case "bare-server":
		err = bareServerMain(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tools:", err)
		os.Exit(1)
	}
}
