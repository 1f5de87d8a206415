// Command ironclaw runs AI-agent tool calls inside sealed sandboxes.
package main

import (
	"os"

	"github.com/ironclaw/ironclaw/internal/cli"
	"github.com/ironclaw/ironclaw/internal/sandbox/native/boot"
)

func main() {
	if boot.IsInit() {
		boot.Main() // the sandbox's pid 1; never returns
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
