// Package container is the host-side skeleton of the container backends,
// oci (runc, crun, runsc) and docker (the Docker Engine API): everything a
// sandbox whose pid 1 is the helper's agent (inside/agent) does the same
// way on both, once. A backend supplies only what differs, how it lays out
// and starts its container and how it runs a process in it (Backend,
// Container); Runtime and Sandbox do the rest:
//
//   - the lifecycle: Create (validate the Spec, build its seal, resolve
//     the gate, listen on the agent's control socket and the exposed
//     ports, start the container, the handshake with the agent, protect
//     pid 1), Done (the control connection's end), Destroy, Close, and
//     the owner records that let a restarted daemon collect what a dead
//     one left (CollectDirs);
//   - the agent's control connection (ListenUnix, AcceptOne, SendGate,
//     AgentReady, TellAgent);
//   - the exec front's protocol (ExecArgv, Front, Watch, MarkKilled), the
//     gate's approved runs (ArmLine, GateExecArgv) and the output cap;
//   - the file modes (WriteFile, ReadFile, ListDir);
//   - Stats and OOM counts through the Container.
//
// What is said to the helper, and how its answers are read, is package
// wire; this package only runs on the host.
//
// Create, in order:
//
//	daemon (Runtime.Create)                     container
//	  | Backend.Prepare: state dir, seal as runtime config, stubs
//	  | listen ctl.sock and <port>.sock
//	  | Container.Start -----------------------> pid 1: the agent
//	  | <-------------------------------------- connect ctl.sock (once; the socket goes)
//	  | -- gate <hello> + real files ---------->
//	  | <-------------------------------------- ready | failed <why>
//	  | Container.Started (pid 1's pid, its OOM score, limits)
//	  | ... commands: Container.Run(front), kill and arm lines on ctl
//	  | Destroy: close ctl (the agent exits), Container.Teardown
package container

import (
	"context"
	"io"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
)

// Backend is what a container backend supplies the skeleton.
type Backend interface {
	// Prepare lays out sandbox c.ID's host state for its seal (the root,
	// the mounts, the gate's stubs, the helper's binary and a socket
	// directory) and makes (does not start) its container, whose pid 1
	// is the agent with c.AgentArgs. On error it leaves nothing behind.
	Prepare(ctx context.Context, c Config) (Container, error)
}

// Config is what Prepare gets; every field is set.
type Config struct {
	ID   string
	Spec sandbox.Spec // validated, with defaults
	Seal *seal.Seal   // Spec's
	// Gate is the resolved gate (nil: nothing gated): its stubs must be
	// bound over every path (WriteStubs).
	Gate *gate.Plan
	// AgentArgs are the agent's arguments after the mode (the exposed
	// ports); the backend may put its own first (wire.GVisorSetupFlag).
	AgentArgs []string
}

// Container is one sandbox's container, as its backend runs it. The
// skeleton calls Start once, Started once after the agent is ready, and
// Teardown once, also after a failed Create; the rest may be called
// concurrently.
type Container interface {
	// SockDir is the host directory bound at wire.SockDir.
	SockDir() string
	// Start starts the container. failed delivers, at most once, why the
	// container could not start or its pid 1 ended before the agent was
	// ready; ctx ends when Create returns.
	Start(ctx context.Context) (failed <-chan error, err error)
	// Diag is ": <the last lines the runtime or pid 1 wrote>" or "".
	Diag() string
	// Started runs once the agent is ready, before any command: it
	// learns pid 1's host pid and protects it (Runtime.LowerInitOOM).
	Started(ctx context.Context, sb *Sandbox) error
	// InitPid is the host pid of the sandbox's pid 1 (or its gVisor
	// sandbox process), 0 if unknown.
	InitPid() int
	// Env is every process's environment before the Spec's and the
	// request's own variables.
	Env() []string
	// Run starts one helper process inside the sandbox, sealed as pid 1.
	Run(ctx context.Context, p Proc) (Process, error)
	// OOMKills counts the sandbox's OOM kills so far.
	OOMKills() int64
	// Stats reports the sandbox's resource use.
	Stats(ctx context.Context) (sandbox.Stats, error)
	// Teardown kills and removes the container and its host state.
	Teardown(ctx context.Context) error
}

// Proc is one helper process to run inside.
type Proc struct {
	// Argv is the helper invocation (wire.HelperPath, a mode, ...).
	Argv []string
	// Env is the process's whole environment; nil is the helper's own,
	// for file operations.
	Env []string
	// Command: the process is a command's exec front, not a file
	// operation. Once its host side has exited, its output is read for a
	// short grace only (a process the command left behind may hold the
	// pipes); a file operation's is read to its end.
	Command bool
	// Stdin, when non-nil, is copied to the process's standard input,
	// which is then closed.
	Stdin io.Reader
	// Stdout and Stderr receive its output; they are never nil.
	Stdout, Stderr io.Writer
}

// Process is one running helper process.
type Process interface {
	// Exited is closed when the process's host side has ended (the
	// runtime's exec process, or dockerd's stream).
	Exited() <-chan struct{}
	// Abort ends the process from the host side; Exited closes soon
	// after.
	Abort()
	// Wait, after Exited, lets the output drain and reports the exit.
	Wait() Exit
}

// Exit is how a helper process ended.
type Exit struct {
	// Code is its exit status, the shell's way (128+N for signal N).
	Code int
	// Err: the exit status could not be learnt (Code is then -1).
	Err error
	// IO: copying its input or output failed.
	IO error
}
