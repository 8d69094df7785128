// Command agentplane is the agentplane server. See `agentplane help`.
package main

import (
	"os"

	"github.com/agentplane/agentplane/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
