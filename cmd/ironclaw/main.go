// Command ironclaw runs AI-agent tool calls inside sealed sandboxes.
package main

import (
	"os"

	"github.com/ironclaw/ironclaw/internal/cli"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
)

func main() {
	if inside.Entered() {
		inside.Main() // in a sandbox: pid 1, an exec front or a file operation; never returns
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
