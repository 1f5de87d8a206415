// Command ironclaw-sandbox is IronClaw's in-sandbox program on its own: the
// native backend's pid 1 and the container backends' helper, without the
// daemon and the CLI linked in. It starts in a fraction of the time the
// ironclaw binary takes (no SQLite, Docker, metrics or protobuf
// initialisers run) and charges each sandbox a fraction of the memory.
//
// The daemon and `ironclaw run` use it when it lies beside their own
// executable and names the same build (see backend.InitExe); otherwise they
// re-execute themselves, which works the same, only slower. Build both with
// `make build`, or `go install github.com/ironclaw/ironclaw/cmd/...`.
package main

import (
	"fmt"
	"os"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
)

func main() {
	if inside.Entered() {
		inside.Main() // never returns
	}
	fmt.Fprintln(os.Stderr, "ironclaw-sandbox: this is IronClaw's in-sandbox program; only the ironclaw daemon and `ironclaw run` start it, as a sandbox's init")
	os.Exit(2)
}
