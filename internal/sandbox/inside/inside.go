// Package inside holds everything that runs inside a sandbox, and only
// that: the code under this folder runs in a sandbox's namespaces, as its
// pid 1 or one of its processes, never in the daemon. The host side (the
// backends, the daemon) never imports these packages, and they import
// nothing of the host side: what crosses the boundary is package wire,
// and what a sandbox is, package seal.
//
//	inside/boot      pid 1 of a native sandbox: builds the root, seals itself, serves
//	inside/agent     the container backends' helper: pid 1 agent, exec front, file modes
//	inside/files     file operations for the daemon's file API (both pid 1s)
//	inside/beneath   path resolution confined beneath /workspace or /tmp
//	inside/execpath  command lookup the way execvp does it
//	inside/gaterun   the in-sandbox half of the exec gate: approved runs
//	inside/steward   the handover to and from the idle pid 1 in C (csrc/)
//
// The ironclaw binary is all of them: main calls Main first, when Entered
// reports that this process was started as one of them.
package inside

import (
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/agent"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/boot"
)

// Entered reports whether this process was started as an in-sandbox
// program: the native init (boot.IsInit) or the container helper
// (agent.IsHelper). Neither can be reached by a flag or a user: each is
// recognised by an argv[0] only a backend gives.
func Entered() bool { return boot.IsInit() || agent.IsHelper() }

// Main runs the in-sandbox program this process was started as and never
// returns. Each refuses to run outside the sandbox it expects. Signals
// the daemon inherited as ignored are not passed on (see
// resetIgnoredSignals).
func Main() {
	resetIgnoredSignals()
	if boot.IsInit() {
		boot.Main()
	}
	agent.Main()
}
