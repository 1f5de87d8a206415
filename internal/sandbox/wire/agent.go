package wire

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// # The agent protocol
//
// On the container backends (oci, docker) the ironclaw binary is bound
// read-only into every sandbox at HelperPath and started by the runtime,
// once as pid 1 (the agent) and once per command and file operation. Its
// first argument is the mode (Mode*); the rest are the mode's arguments.
//
// The agent's control connection (CtlSock) is line-based text. The agent
// speaks first, after the daemon's gate message:
//
//	daemon -> agent   gate <GateHello JSON>\n + one real file per program (SCM_RIGHTS)
//	agent -> daemon   ready\n                   every exposed port listens
//	agent -> daemon   failed <text>\n           it cannot serve; it exits
//	daemon -> agent   kill <pgid>\n             SIGKILL a command's group
//	daemon -> agent   oom\n                     SIGKILL the largest process
//	daemon -> agent   arm <nonce> <Armed JSON>\n   before an approved exec's front starts
//	daemon -> agent   disarm <nonce>\n          once it ended, run or not
//
// The daemon accepts exactly one connection on CtlSock and removes the
// socket before any command runs, so nothing else in the sandbox can take
// the agent's place. When the connection ends, the agent exits, and with
// pid 1 goes the whole sandbox.
//
// The exec front tells the daemon how the start went on its stderr, before
// any of the command's output:
//
//	<Marker(nonce)>started <pid>\n       the command runs (execve succeeded)
//	<Marker(nonce)>failed <code> <errno> <text>\n
//	                                     it could not start; exit 127 or 126
//
// The nonce is fresh per exec and the marker starts with a NUL byte, so
// ordinary output is never mistaken for a header. <pid> is the command's
// pid inside the sandbox's pid namespace; it leads a new session and
// process group, so the agent can kill the command with everything it
// forked.
//
// A file mode's data travels on stdin (write: the upload framed by
// NewFramer) or stdout (read: the file's bytes; list: one JSON
// sandbox.FileInfo a line). Success is exit 0; a failure is exit
// FileFailed with one JSON FileError on stderr.

// HelperDir is where the helper and its sockets live inside every
// container sandbox.
const HelperDir = "/.ironclaw"

// HelperPath is where the ironclaw binary is bound inside the sandbox. Its
// name is how the binary knows it runs as the helper: os.Args[0] is
// exactly this path, because a runtime execs process.args[0] by that name.
const HelperPath = HelperDir + "/ironclaw-oci-helper"

// SockDir holds the daemon's unix sockets, bound read-only (sockets on a
// read-only mount still accept connections).
const SockDir = HelperDir + "/sock"

// CtlSock is the daemon's control socket inside SockDir; the agent
// connects to it once, at start.
const CtlSock = "ctl.sock"

// PortSock is the socket name for an exposed TCP port inside SockDir.
func PortSock(port uint16) string { return strconv.Itoa(int(port)) + ".sock" }

// The helper's modes (its first argument).
const (
	// ModeAgent is pid 1; its arguments are the exposed ports, after
	// GVisorSetupFlag on runsc.
	ModeAgent = "agent"
	// ModeExec is the front of a command: nonce, nproc, cwd, argv...
	ModeExec = "exec"
	// ModeWrite, ModeRead and ModeList are the file operations: a path
	// (and for write an octal mode).
	ModeWrite = "write"
	ModeRead  = "read"
	ModeList  = "list"
	// ModeProbe prints the seal it runs under (ParseProbe).
	ModeProbe = "probe"
	// ModeLimit is the exec front's trampoline under RLIMIT_NPROC, never
	// started by the daemon.
	ModeLimit = "limit"
	// ModeGateExec is the front of an approved exec of a gated program:
	// nonce and the agent's gate socket; the agent starts the command.
	ModeGateExec = "gate-exec"
)

// IsHelperMode reports whether s names one of the helper's modes.
func IsHelperMode(s string) bool {
	switch s {
	case ModeAgent, ModeExec, ModeWrite, ModeRead, ModeList, ModeProbe, ModeLimit, ModeGateExec:
		return true
	}
	return false
}

// HelperExitRefused is the helper's exit status when it refuses to run
// (outside a sealed sandbox, a bad command line).
const HelperExitRefused = 125

// Control messages (see above).
const (
	MsgReady  = "ready"
	MsgFailed = "failed"
	MsgKill   = "kill"
	MsgOOM    = "oom"
	MsgGate   = "gate"
	MsgArm    = "arm"
	MsgDisarm = "disarm"
)

// MaxCtlLine bounds one control line the agent reads: an arm line carries
// an exec's argv and environment.
const MaxCtlLine = 1 << 20

// MaxGateHello bounds the daemon's gate message.
const MaxGateHello = 1 << 20

// GateHello is the daemon's first message to the agent.
type GateHello struct {
	// Sock is the abstract unix socket the agent listens on for approved
	// runs ("" when nothing is gated).
	Sock string `json:"sock,omitempty"`
	// Programs are the gated programs; their real files travel beside
	// the message, in the same order.
	Programs []GateProgram `json:"programs,omitempty"`
}

// Armed is one approved exec, as the daemon arms it.
type Armed struct {
	Key      string   `json:"key"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Cwd      string   `json:"cwd"`
	NProc    uint64   `json:"nproc,omitempty"`    // RLIMIT_NPROC for the command (runsc), 0 for none
	Readable bool     `json:"readable,omitempty"` // run a 0555 copy (gVisor refuses to exec an unreadable one)
}

// Marker starts every header line for an exec with this nonce.
func Marker(nonce string) string { return "\x00ironclaw-exec:" + nonce + " " }

// MaxHeader bounds one header line (marker and newline included).
const MaxHeader = 4096

// Header is one parsed header line.
type Header struct {
	Started bool
	Pid     int    // with Started
	Code    string // without Started: a Code* constant
	Errno   int
	Text    string
}

// ParseHeader parses a header line without its marker and newline.
func ParseHeader(line string) (Header, error) {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "started":
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			return Header{}, fmt.Errorf("bad exec header %q", line)
		}
		return Header{Started: true, Pid: pid}, nil
	case "failed":
		f := strings.SplitN(rest, " ", 3)
		if len(f) < 2 {
			return Header{}, fmt.Errorf("bad exec header %q", line)
		}
		errno, _ := strconv.Atoi(f[1])
		h := Header{Code: f[0], Errno: errno}
		if len(f) == 3 {
			h.Text = f[2]
		}
		return h, nil
	}
	return Header{}, fmt.Errorf("bad exec header %q", line)
}

// FailedLine is the header (or gate reply) that reports a start failure,
// without marker: "failed <code> <errno> <text>" on one line.
func FailedLine(code string, errno int, text string) string {
	return fmt.Sprintf("failed %s %d %s", code, errno, strings.ReplaceAll(text, "\n", " "))
}

// FileFailed is the exit status of a failed file operation.
const FileFailed = 3

// FileError is how a file operation reports its failure.
type FileError struct {
	Code  string `json:"code"` // a Code* constant
	Errno int    `json:"errno,omitempty"`
	Err   string `json:"err"`
}

func (e *FileError) Error() string { return e.Err }

// ParseFileError is the error a file mode reported on stderr as it exited
// with FileFailed, in the sandbox error vocabulary (FileErr), or nil when
// stderr holds no such report.
func ParseFileError(stderr []byte) error {
	var fe FileError
	if json.Unmarshal(stderr, &fe) != nil {
		return nil
	}
	return FileErr(fe.Code, fe.Err)
}

// GVisorSetupFlag is the agent's first argument on runsc:
// "--gvisor-setup=<memory bytes>,<pids>,<cpu quota us>,<cpu period us>".
// The agent then starts holding the capabilities the bundle grants it
// alone and, before anything else runs, makes the sentry's /dev and
// cgroup view look like every other backend's, then drops them (see
// inside/agent).
const GVisorSetupFlag = "--gvisor-setup="

// GVisorSetupArg formats GVisorSetupFlag's argument.
func GVisorSetupArg(memory, pids, quotaUs, periodUs int64) string {
	return fmt.Sprintf("%s%d,%d,%d,%d", GVisorSetupFlag, memory, pids, quotaUs, periodUs)
}

// ParseGVisorSetup parses GVisorSetupArg's values (without the flag).
func ParseGVisorSetup(arg string) (memory, pids, quotaUs, periodUs int64, err error) {
	var v [4]int64
	parts := strings.Split(arg, ",")
	if len(parts) != len(v) {
		return 0, 0, 0, 0, fmt.Errorf("bad %s%s", GVisorSetupFlag, arg)
	}
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, 0, 0, fmt.Errorf("bad %s%s", GVisorSetupFlag, arg)
		}
		v[i] = n
	}
	return v[0], v[1], v[2], v[3], nil
}

// ProbeFields are what the probe mode prints, one "key value" a line, and
// the values every sealed sandbox must show; see ParseProbe.
var ProbeFields = map[string]string{
	"uid": strconv.Itoa(sandbox.UID), "gid": strconv.Itoa(sandbox.GID), "pid": "1",
	"cap_eff": "0x0", "cap_prm": "0x0", "cap_inh": "0x0", "no_new_privs": "1", "seccomp": "2",
}

// ParseProbe checks the probe mode's output against ProbeFields and says
// which field is off.
func ParseProbe(out string) error {
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = v
		}
	}
	keys := make([]string, 0, len(ProbeFields))
	for k := range ProbeFields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v := ProbeFields[k]; got[k] != v {
			return fmt.Errorf("%s is %q, want %q (probe said %q)", k, got[k], v, strings.TrimSpace(out))
		}
	}
	return nil
}
