// Command ironclaw runs AI-agent tool calls inside sealed sandboxes.
//
// It links the light part of the command line only, so that it starts
// like a C tool; the commands that need the daemon, its database or the
// image registry client (serve, token add, offline audit verify, run
// --image) run in ironclaw-full beside it (cmd/ironclaw-full).
package main

import (
	"github.com/ironclaw/ironclaw/internal/cli"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
)

func main() {
	if inside.Entered() {
		inside.Main() // in a sandbox: pid 1, an exec front or a file operation; never returns
	}
	cli.Exit(nil)
}
