// Command governance measures issue 14's governance features on loopback,
// against the real `agentplane serve` binary running as its own process on
// SQLite and on PostgreSQL:
//
//	go run ./bench/governance limits   # what rate limits add to the LLM proxy and the WebSocket ingress
//	go run ./bench/governance queue    # the global run queue: 1,000 queued runs admitted in order, wait-to-start after a slot frees
//
// limits starts two platforms per store — one with the config file's
// limits: (rates set high enough never to refuse) and one without — and
// sends the same sequential load to both, interleaved round by round, so
// their difference is what the limits cost.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: go run ./bench/governance <command> [flags]

commands:
  limits   latency the per-key rate limits add on the LLM proxy and WebSocket paths
  queue    admission order and wait-to-start of 1,000 queued runs

run "go run ./bench/governance <command> -h" for its flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "limits":
		err = limitsMain(args)
	case "queue":
		err = queueMain(args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "governance:", err)
		os.Exit(1)
	}
}
