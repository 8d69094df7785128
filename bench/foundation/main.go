// Command foundation measures the event log and delivery of agentplane (issues 2 and 13) on
// loopback, against the real `agentplane serve` binary running as its own
// process, each time next to a baseline measured in the same run:
//
//	go run ./bench/foundation latency   # agent SSE write → client WebSocket receive, 50/200/1,000 streams × 20 deltas/s, server CPU per event
//	go run ./bench/foundation memory    # memory per idle WebSocket connection at 10,000 connections
//	go run ./bench/foundation walframes # WAL pages a streaming commit writes on SQLite, by b-tree
//
// Sustained event appends are a `go test` benchmark in this directory:
//
//	go test -run '^$' -bench . -benchtime 5s ./bench/foundation
//
// The other subcommands (relay, echo-server) are the baselines' server
// processes; the tool starts them itself.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: go run ./bench/foundation <command> [flags]

commands:
  latency       delivery latency, agent SSE write → client WebSocket receive
  memory        memory per idle WebSocket connection
  walframes     WAL pages a streaming commit writes on SQLite, by b-tree (a diagnostic)
  relay         (internal) the latency baseline: a relay without persistence
  echo-server   (internal) the memory baseline: a bare gorilla/websocket echo server

run "go run ./bench/foundation <command> -h" for its flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "latency":
		err = latencyMain(args)
	case "memory":
		err = memoryMain(args)
	case "walframes":
		err = walframesMain(args)
	case "relay":
		err = relayMain(args)
	case "echo-server":
		err = echoServerMain(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "foundation:", err)
		os.Exit(1)
	}
}
