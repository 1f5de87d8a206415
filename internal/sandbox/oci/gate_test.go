package oci_test

import (
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/conformance"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// A gated program cannot run without an approval, however it is spelled;
// an approved exec runs exactly its argv as the real program, started by
// the agent, and nothing else in the sandbox can copy it while it runs.
func TestHostileExecGate(t *testing.T) {
	sandboxtest.EachOCI(t, func(t *testing.T, r *oci.Runtime) { conformance.RunGate(t, r) })
}

// The agent's gate socket, which any process inside can reach, starts
// nothing for a request no approved exec armed: a made-up nonce, no
// descriptors, garbage.
func TestHostileExecGateAgentSocket(t *testing.T) {
	sandboxtest.EachOCI(t, func(t *testing.T, r *oci.Runtime) {
		b := sandboxtest.New(t, r, sandbox.Spec{Gate: []string{"tac"}})
		if o := b.Sh("command -v python3"); o.Res.ExitCode != 0 {
			t.Skip("no python3 in the host view")
		}
		o := b.Exec(sandbox.ExecRequest{Argv: []string{"python3", "-c", `
import socket, array, re
name = None
for line in open('/proc/net/unix'):
    m = re.search(r'@(ironclaw-gate-[0-9a-f]+)', line)
    if m: name = m.group(1)
print('socket', name is not None)
def ask(msg, fds):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect('\0' + name)
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))] if fds else []
    s.sendmsg([msg], anc)
    print(repr(s.recv(4096).decode()))
ask(b'run deadbeefdeadbeef\n', [0, 1, 2])
ask(b'run\n', [])
ask(b'garbage' * 100, [0, 1, 2, 0, 1])
`}})
		if o.Err != nil || o.Res.ExitCode != 0 || !strings.Contains(o.Stdout, "socket True") || strings.Count(o.Stdout, "failed bad-request") != 3 || strings.Contains(o.Stdout, "started") {
			t.Fatalf("asking the agent's gate from inside: %v, exit %d, %q %q", o.Err, o.Res.ExitCode, o.Stdout, o.Stderr)
		}
	})
}
