// Package wire is everything that crosses the sandbox boundary: the
// messages, names and codes the daemon (host side) and the code inside a
// sandbox (package inside) agree on. It holds no logic of either side, so
// both import it and neither imports the other. A change to what crosses
// the boundary is made here, once.
//
// There are two protocols, one per kind of pid 1:
//
//   - native.go: the native backend's daemon and its init (inside/boot),
//     over one SOCK_SEQPACKET socketpair (diagram below);
//   - agent.go: the container backends' daemon (package container) and the
//     helper inside (inside/agent), as command lines, a line-based control
//     connection and marked header lines (diagram there);
//
// and what both share: the failure codes pid 1 and the helper report and
// their meaning in the sandbox error vocabulary (codes.go), the framing
// of an upload (frame.go), and the description of a gated program
// (gate.go).
//
// Every parsing function here reads what a hostile sandbox may have
// written (Conn.Recv, ParseHeader, ParseFileError, the Unframer) and is
// bounded: a packet, a header line, a frame, a count of descriptors.
//
// # The native protocol
//
// Both ends hold one SOCK_SEQPACKET socketpair: each packet is one JSON
// message, and file descriptors travel beside it as SCM_RIGHTS.
//
//	parent                                   child (pid 1 in the sandbox)
//	  | -- clone(new user,pid,mnt,net,ipc,uts[,cgroup] ns) --> |
//	  |    (sharing the parent's memory until the execve)      |
//	  |    (parent puts the child into its cgroups)            |
//	  | -- writes the child's uid_map, gid_map ---------------> |
//	  | -- Config ---------------------------------------------> check maps, build root, pivot_root, seal
//	  | <------------------------------- Reply{Op: ready|failed} (+ [listeners on lo])
//	  | -- Request{exec} + [stdin, stdout, stderr] ------------> fork+exec
//	  | <------------------------------- Reply{started, pid} (+ [pty master] with a tty)
//	  | <------------------------------- Reply{exited, status}
//	  | -- Request{signal|resize} -----------------------------> kill(-pgid) / TIOCSWINSZ
//	  | -- Request{write|read|list} + [pipe end] --------------> copy or list within /workspace, /tmp
//	  |    (a write's pipe carries the upload framed: frame.go)
//	  | <------------------------------- Reply{done|failed}
//
// The same socket is pid 1's standard error (descriptor 2 as well as 3):
// what it writes there, a refusal or a Go runtime's panic, arrives as
// packets of text between the messages, and the daemon's Conn passes them
// to its log (Conn.Stderr). So a sandbox costs the daemon one descriptor.
//
// pid 1 may be the Go init (inside/boot) or, once ready, the steward
// (inside/steward, in C), which answers exec and signal requests in these
// same messages; the daemon cannot tell them apart and need not.
//
// The child never learns anything about the host beyond what Config says,
// and the parent never executes anything the child sends: replies are
// only matched to pending requests by ID.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"golang.org/x/sys/unix"
)

// MaxPacket bounds one message. An exec request carries argv and env, so
// this is also the largest command line a sandbox accepts.
const MaxPacket = 128 << 10

// maxFDs bounds the descriptors accepted beside one message.
const maxFDs = 64

// Op names a request or reply.
type Op string

// Requests (parent to child).
const (
	OpExec   Op = "exec"
	OpSignal Op = "signal"
	OpResize Op = "resize"
	OpWrite  Op = "write"
	OpRead   Op = "read"
	OpList   Op = "list"
)

// Replies (child to parent).
const (
	OpReady   Op = "ready"
	OpStarted Op = "started"
	OpExited  Op = "exited"
	OpDone    Op = "done"
	OpFailed  Op = "failed"
)

// AlternativesSource names, among Config.Sources, the mount tree of the
// view's alternatives links that the daemon made once for all its
// sandboxes (native's sharedAlternatives): the init binds it at
// /etc/alternatives instead of making the links itself. It is not an
// absolute path, so no host source can take its name.
const AlternativesSource = "ironclaw:alternatives"

// Config is the first message: everything the child needs to build and seal
// the sandbox. Sections: the seal, where its sources come from, what the
// sandbox may know of its limits, the init's own work.
type Config struct {
	// Seal is the sandbox's seal (package seal): the root, the mounts,
	// the masked paths, the identity, the rlimits, the landlock rules.
	// The init applies all of it, and seccomp (internal/seccomp's filter,
	// the seal's rules) last.
	Seal seal.Seal `json:"seal"`
	// Sources are the host paths whose detached mount trees (open_tree)
	// travel beside the Config as descriptors, in this order. The daemon
	// opens them with its own privileges; a source not listed (rootless
	// mode, old kernels) is opened by the child, as the sandbox's host uid.
	// One of them may be AlternativesSource, which is no host path.
	Sources []string `json:"sources,omitempty"`

	// What the sandbox may know of its limits: the cgroup view mounted
	// read-only at /sys/fs/cgroup, and the CPUs its commands run on (the
	// affinity mask pid 1's forking thread takes, so that nproc and the
	// runtimes that count CPUs see the CPU limit; empty: all).
	Cgroup CgroupView `json:"cgroup"`
	CPUs   []int      `json:"cpus,omitempty"`

	// The init's own work.

	// Listen are the exposed ports: the child binds them on lo before the
	// seal and hands the listeners back with "ready".
	Listen []uint16 `json:"listen,omitempty"`
	// UnshareCgroup: cgroup v1, enter a cgroup namespace once placed.
	UnshareCgroup bool `json:"unshare_cgroup"`
	// WorkloadTasks: cgroup v1, the last descriptor beside the Config is
	// the tasks file of the pids cgroup's workload child, opened by the
	// daemon; once set up, pid 1's main thread writes "0" to it to move
	// itself there (see native's reservePids), and closes it.
	WorkloadTasks bool `json:"workload_tasks,omitempty"`
	// Steward: the descriptor after the trees (before WorkloadTasks' one)
	// is the steward's executable (O_PATH), which pid 1 executes in its
	// own place once ready (see inside/steward). The daemon sends it only
	// when it found a steward that speaks StewardProtocol.
	Steward bool `json:"steward,omitempty"`
	// StewardAfter is how long after "ready" pid 1 becomes the steward;
	// 0: steward.FirstHandover.
	StewardAfter time.Duration `json:"steward_after,omitempty"`
	// RequireLandlock: fail on a kernel without landlock.
	RequireLandlock bool `json:"require_landlock"`
	// Gate: the gated programs to mask (and to run for approved execs).
	Gate []GateProgram `json:"gate,omitempty"`
	// WorkloadOOMScoreAdj is the oom_score_adj every command starts with
	// (0: pid 1's own). pid 1 raises itself to it around each fork and
	// goes back to its own (which the daemon may have lowered), so the OOM
	// killer takes the workload first; landlock keeps commands from
	// writing theirs.
	WorkloadOOMScoreAdj int `json:"workload_oom_score_adj,omitempty"`
}

// CgroupView says what to mount at /sys/fs/cgroup (see cgroups.View).
type CgroupView struct {
	Version int `json:"version"` // 1 or 2; 0: no view
	// V1 are the v1 hierarchies: Name is the directory and the mount's
	// options, Links symlinks to it.
	V1 []CgroupMount `json:"v1,omitempty"`
}

// CgroupMount is one v1 hierarchy of a CgroupView.
type CgroupMount struct {
	Name  string   `json:"name"`
	Links []string `json:"links,omitempty"`
}

// Request is a parent-to-child message.
type Request struct {
	Op     Op       `json:"op"`
	ID     uint64   `json:"id"`
	Argv   []string `json:"argv,omitempty"`
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	TTY    bool     `json:"tty,omitempty"`
	Rows   uint16   `json:"rows,omitempty"`
	Cols   uint16   `json:"cols,omitempty"`
	Signal int      `json:"signal,omitempty"`
	Path   string   `json:"path,omitempty"`
	Mode   uint32   `json:"mode,omitempty"`
	Gate   string   `json:"gate,omitempty"` // exec: the approved gated program's key (sandbox.ExecRequest.Gate)
}

// Reply is a child-to-parent message.
type Reply struct {
	Op     Op     `json:"op"`
	ID     uint64 `json:"id"`
	Pid    int    `json:"pid,omitempty"`
	Status int    `json:"status,omitempty"` // a raw wait status
	Code   string `json:"code,omitempty"`   // why an op failed: not-found, not-executable, bad-cwd, bad-request, denied, io, aborted, no-resources
	Errno  int    `json:"errno,omitempty"`
	Err    string `json:"err,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

// StewardProtocol is the marker a steward binary (inside/steward/csrc)
// holds for the handover and message format it speaks: the daemon hands
// a sandbox a steward only when its file holds this exact marker.
const StewardProtocol = "ironclaw-steward protocol 1"

// Conn is one end of the socketpair. Send is safe for concurrent use; Recv
// must be called from one goroutine.
type Conn struct {
	// NonblockFDs makes received descriptors non-blocking so the Go
	// runtime's poller serves them (the parent's side). The child leaves
	// them blocking: it hands them to commands as standard streams.
	NonblockFDs bool

	// Stderr, when set, receives the packets that are not messages: the
	// peer's standard error shares this socket (a native sandbox's pid 1
	// has it as descriptor 2, so a sandbox costs its daemon one
	// descriptor), and anything the peer writes there arrives as a packet
	// of text, one per write. A packet that carries no descriptors and is
	// not JSON is such text; Recv hands it over and reads on. The
	// bytes are Recv's scratch buffer, valid until Stderr returns.
	Stderr func(text []byte)

	c  *net.UnixConn
	rc syscall.RawConn
}

// packet is the room one message is read into. A Conn holds none while it
// waits: Recv takes one from packets only once the socket is readable and
// puts it back before it returns, so a daemon holding thousands of idle
// sandboxes holds a few of these (as many as are being read at once), not
// one of MaxPacket bytes per sandbox. The pool is scratch space, no state:
// what a packet held is dead once Recv has returned.
type packet struct {
	buf [MaxPacket + 1]byte
	oob [oobSpace]byte
}

// oobSpace is unix.CmsgSpace(4*maxFDs): room for maxFDs descriptors in one
// control message (a header of 16 bytes, then the aligned int32s).
const oobSpace = 16 + 4*maxFDs

var packets = sync.Pool{New: func() any { return new(packet) }}

// NewConn takes ownership of f, a SOCK_SEQPACKET unix socket.
func NewConn(f *os.File) (*Conn, error) {
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, errors.New("wire: not a unix socket")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("wire: %w", err)
	}
	return &Conn{c: uc, rc: rc}, nil
}

// Pair returns a connected socketpair: one end for the parent (a Conn) and
// one to hand to the child. The child's end is close-on-exec in the parent
// and becomes the child's descriptor 3 through ExtraFiles.
func Pair() (*Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("wire: socketpair: %w", err)
	}
	for _, fd := range fds {
		// The default buffer may hold less than one MaxPacket message.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 2*MaxPacket)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 2*MaxPacket)
	}
	c, err := NewConn(os.NewFile(uintptr(fds[0]), "ironclaw-ctl"))
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return c, os.NewFile(uintptr(fds[1]), "ironclaw-ctl-child"), nil
}

// Send writes one message with optional descriptors beside it. The caller
// keeps ownership of files.
func (c *Conn) Send(msg any, files ...*os.File) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("wire: encode: %w", err)
	}
	return c.SendBytes(b, files...)
}

// SendBytes writes b as one message, as it is (a set-up plan for an init
// that reads no JSON), with optional descriptors beside it.
func (c *Conn) SendBytes(b []byte, files ...*os.File) error {
	if len(b) > MaxPacket {
		return fmt.Errorf("wire: message of %d bytes is over the %d-byte limit", len(b), MaxPacket)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("wire: send: %w", err)
	}
	return nil
}

// Recv reads one message into msg and returns the descriptors that came
// with it (close-on-exec; the caller owns them).
func (c *Conn) Recv(msg any) ([]*os.File, error) {
	reset := false
	for {
		p, n, oobn, flags, err := c.readPacket()
		if err != nil {
			if c.Stderr != nil && !reset && errors.Is(err, syscall.ECONNRESET) {
				// The peer closed with messages to it unread, and the
				// kernel says so (once) before the packets it wrote last,
				// which are its last words: read on to them.
				reset = true
				continue
			}
			return nil, fmt.Errorf("wire: recv: %w", err)
		}
		files, again, err := c.decode(p, n, oobn, flags, msg)
		packets.Put(p)
		if !again {
			return files, err
		}
	}
}

// readPacket waits until the socket is readable, then takes a packet and
// reads one message into it. The caller puts the packet back.
func (c *Conn) readPacket() (p *packet, n, oobn, flags int, err error) {
	var rerr error
	err = c.rc.Read(func(fd uintptr) bool {
		if p == nil {
			p = packets.Get().(*packet)
		}
		for {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), p.buf[:], p.oob[:], unix.MSG_CMSG_CLOEXEC)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			packets.Put(p) // nothing to read yet: wait holding none
			p = nil
			return false
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil && p != nil {
		packets.Put(p)
		p = nil
	}
	return p, n, oobn, flags, err
}

// decode turns the packet p into msg and its descriptors. again: it was
// the peer's standard error (handed to Stderr), and Recv reads on.
func (c *Conn) decode(p *packet, n, oobn, flags int, msg any) (_ []*os.File, again bool, _ error) {
	files, ferr := parseRights(p.oob[:oobn], c.NonblockFDs)
	if c.Stderr != nil && ferr == nil && len(files) == 0 && n > 0 && flags&unix.MSG_CTRUNC == 0 {
		if n > MaxPacket {
			n = MaxPacket
		}
		if flags&unix.MSG_TRUNC != 0 || p.buf[0] != '{' {
			c.Stderr(p.buf[:n])
			return nil, true, nil
		}
		// Unmarshal checks the syntax of the whole packet before it
		// touches msg, so text that merely starts with a brace
		// leaves msg as it was.
		var syntax *json.SyntaxError
		if err := json.Unmarshal(p.buf[:n], msg); errors.As(err, &syntax) {
			c.Stderr(p.buf[:n])
			return nil, true, nil
		} else if err != nil {
			return nil, false, fmt.Errorf("wire: decode: %w", err)
		}
		return nil, false, nil
	}
	if ferr != nil || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > MaxPacket {
		closeAll(files)
		if ferr == nil {
			ferr = errors.New("message or descriptors truncated")
		}
		return nil, false, fmt.Errorf("wire: recv: %w", ferr)
	}
	if n == 0 {
		// End of stream. (A peer that wrote an empty packet reads as
		// gone too: SOCK_SEQPACKET cannot tell the two apart.)
		closeAll(files)
		return nil, false, fmt.Errorf("wire: recv: %w", net.ErrClosed)
	}
	if err := json.Unmarshal(p.buf[:n], msg); err != nil {
		closeAll(files)
		return nil, false, fmt.Errorf("wire: decode: %w", err)
	}
	return files, false, nil
}

// FD is the connection's descriptor, for a pid 1 that hands the socket
// across execve (inside/steward). It stays owned by c.
func (c *Conn) FD() (int, error) {
	fd := -1
	if err := c.rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// SetReadDeadline bounds the wait of Recv; a Recv past it fails with an
// error that wraps os.ErrDeadlineExceeded and reads nothing.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// Close closes the connection; a blocked Recv returns.
func (c *Conn) Close() error { return c.c.Close() }

func parseRights(oob []byte, nonblock bool) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			if nonblock {
				_ = unix.SetNonblock(fd, true)
			}
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	if len(files) > maxFDs {
		closeAll(files)
		return nil, fmt.Errorf("%d descriptors in one message", len(files))
	}
	return files, nil
}

// CloseAll closes every non-nil file.
func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// CloseAll closes every non-nil file.
func CloseAll(files []*os.File) { closeAll(files) }
