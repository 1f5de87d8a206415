// Command ironclaw-full is the whole ironclaw command line, the daemon
// included: `ironclaw serve` (and the few other commands that need the
// daemon's packages) runs here. It works on its own as well, only with a
// slower start for every command.
package main

import (
	"os"

	"github.com/ironclaw/ironclaw/internal/cli"
	"github.com/ironclaw/ironclaw/internal/cli/full"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
)

func main() {
	if inside.Entered() {
		inside.Main() // in a sandbox: pid 1, an exec front or a file operation; never returns
	}
	_ = os.Unsetenv(cli.DelegatedEnv) // the thin CLI's mark, for the thin CLI only
	cli.Exit(full.Commands{})
}
