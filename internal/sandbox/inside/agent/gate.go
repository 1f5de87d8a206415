package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/execpath"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/gaterun"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// The gate (see package gate) on the container backends. The runtime masks
// every gated path with the stub (the daemon lists those binds in the OCI
// spec or the Docker mounts); the agent holds the real programs and starts
// the approved runs:
//
//	daemon -> agent  (first, on ctl)   gate <GateHello JSON>\n  + one real file per program (SCM_RIGHTS)
//	daemon -> agent  (ctl)             arm <nonce> <Armed JSON>\n   before an approved exec's front starts
//	daemon -> agent  (ctl)             disarm <nonce>\n             once it ended, run or not
//	front  -> agent  (GateHello.Sock)  run <nonce>\n  + the front's stdin and its stdout, stderr pipes
//	agent  -> front                    started <pid>\n | failed <code> <errno> <text>\n
//	agent  -> front                    exited <wait status>\n
//
// The front of an approved exec (ModeGateExec) is started like any other,
// but does not fork the command: it asks the agent, which takes the argv,
// environment and directory from the daemon's arm line (never from the
// front, whose memory other processes of the sandbox could write), checks
// that argv[0] reaches the stub of the armed program, and forks the real
// program from an unreadable memory copy (gaterun.Real.Runnable) in a session
// of its own, with the front's descriptors as its stdio. A nonce is good
// for one run. Processes in the sandbox can read a front's command line,
// and so its nonce: one that raced the front to the socket would get the
// approved argv run, once, with its own stdio instead of the front's,
// which is no more than the agent that asked for it could do anyway.

// Bounds on what the gate holds.
const (
	maxArmed   = 64 // armed runs at once
	armedTTL   = 2 * time.Minute
	maxGateRun = 32 // connections served at once
)

// agentGate is the agent's gate state.
var agentGate struct {
	table *gaterun.Table

	mu      sync.Mutex
	armed   map[string]armedRun
	waiters map[int]chan syscall.WaitStatus // pid of a run -> its exit
}

type armedRun struct {
	wire.Armed
	until time.Time
}

// receiveGate reads the daemon's gate message (first on ctl) with the real
// programs beside it, records each stub's identity, and starts the socket
// approved runs are asked on. It returns with nothing gated for an empty
// message.
func receiveGate(ctl net.Conn) error {
	uc, ok := ctl.(*net.UnixConn)
	if !ok {
		return errors.New("the control connection is not a unix socket")
	}
	_ = ctl.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer ctl.SetReadDeadline(time.Time{})
	var msg []byte
	var files []*os.File
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*wire.MaxGatePrograms))
	for !bytes.Contains(msg, []byte("\n")) {
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, fd := range fds {
					unix.CloseOnExec(fd)
					files = append(files, os.NewFile(uintptr(fd), "gated"))
				}
			}
		}
		if err != nil || n == 0 {
			closeFiles(files)
			return fmt.Errorf("reading the gate: %v", err)
		}
		if msg = append(msg, buf[:n]...); len(msg) > wire.MaxGateHello {
			closeFiles(files)
			return errors.New("the gate message is too large")
		}
	}
	line, rest, _ := bytes.Cut(msg, []byte("\n"))
	word, body, _ := strings.Cut(string(line), " ")
	var hello wire.GateHello
	if word != wire.MsgGate || len(rest) > 0 || json.Unmarshal([]byte(body), &hello) != nil || len(files) != len(hello.Programs) {
		closeFiles(files)
		return fmt.Errorf("bad gate message (%d files)", len(files))
	}
	tab := gaterun.NewTable()
	for i, p := range hello.Programs {
		if len(p.Keys) == 0 {
			closeFiles(files)
			return errors.New("a gated program without a key")
		}
		r := &gaterun.Real{Keys: p.Keys, File: files[i]}
		for _, q := range p.Paths {
			var st unix.Stat_t
			if err := unix.Stat(q, &st); err != nil {
				closeFiles(files)
				return fmt.Errorf("gated %s: %w", q, err)
			}
			tab.Add(st.Dev, st.Ino, r)
		}
	}
	agentGate.mu.Lock()
	agentGate.table = tab
	agentGate.armed = map[string]armedRun{}
	agentGate.waiters = map[int]chan syscall.WaitStatus{}
	agentGate.mu.Unlock()
	if tab.Empty() {
		return nil
	}
	l, err := net.Listen("unix", "@"+hello.Sock)
	if err != nil {
		return fmt.Errorf("gate socket: %w", err)
	}
	go serveGate(l)
	return nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// gateCtl handles the daemon's arm and disarm lines.
func gateCtl(word, arg string) {
	nonce, body, _ := strings.Cut(arg, " ")
	g := &agentGate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed == nil {
		return
	}
	now := time.Now()
	for n, a := range g.armed {
		if now.After(a.until) {
			delete(g.armed, n)
		}
	}
	switch word {
	case wire.MsgArm:
		var a wire.Armed
		if nonce == "" || json.Unmarshal([]byte(body), &a) != nil || len(a.Argv) == 0 || len(g.armed) >= maxArmed {
			return
		}
		g.armed[nonce] = armedRun{a, now.Add(armedTTL)}
	case wire.MsgDisarm:
		delete(g.armed, nonce)
	}
}

// takeArmed spends the run armed for nonce, waiting a little for an arm
// line still on its way.
func takeArmed(nonce string) (wire.Armed, bool) {
	for deadline := time.Now().Add(2 * time.Second); ; {
		agentGate.mu.Lock()
		a, ok := agentGate.armed[nonce]
		delete(agentGate.armed, nonce)
		agentGate.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return a.Armed, ok && time.Now().Before(a.until)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gateReaped passes a reaped child's status to the run waiting for it.
// The reaper calls it for every pid it collects; runs register under the
// same lock around their fork, so none is missed.
func gateReaped(pid int, ws syscall.WaitStatus) {
	agentGate.mu.Lock()
	ch, ok := agentGate.waiters[pid]
	delete(agentGate.waiters, pid)
	agentGate.mu.Unlock()
	if ok {
		ch <- ws
	}
}

func serveGate(l net.Listener) {
	sem := make(chan struct{}, maxGateRun)
	for {
		c, err := l.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case sem <- struct{}{}:
			go func() {
				defer func() { <-sem }()
				defer c.Close()
				gateRun(c.(*net.UnixConn))
			}()
		default:
			c.Close()
		}
	}
}

// gateRun serves one front: it starts the armed run and reports its start
// and its exit.
func gateRun(c *net.UnixConn) {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	var files []*os.File
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), "stdio"))
			}
		}
	}
	defer func() { closeFiles(files) }()
	reply := func(s string) {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, s+"\n")
	}
	fail := func(code string, errno syscall.Errno, text string) {
		reply(fmt.Sprintf("failed %s %d %s", code, int(errno), strings.ReplaceAll(text, "\n", " ")))
	}
	word, nonce, _ := strings.Cut(strings.TrimSpace(string(buf[:n])), " ")
	if err != nil || word != "run" || len(files) != 3 {
		fail(wire.CodeBadRequest, unix.EINVAL, "bad gated run request")
		return
	}
	a, ok := takeArmed(nonce)
	if !ok {
		fail(wire.CodeBadRequest, unix.EACCES, "no approved run is armed for this exec")
		return
	}
	check := a.Argv[0]
	if strings.Contains(check, "/") && !path.IsAbs(check) {
		check = path.Join(a.Cwd, check)
	}
	prog, errno := execpath.Look(check, a.Env)
	if errno != 0 {
		code := wire.CodeNotExecutable
		if errno == unix.ENOENT {
			code = wire.CodeNotFound
		}
		fail(code, errno, fmt.Sprintf("%s: %v", a.Argv[0], errno))
		return
	}
	prog, env, m, err := agentGate.table.Run(a.Argv[0], prog, a.Cwd, a.Key, a.Env, a.Readable)
	if err != nil {
		fail(wire.CodeNotExecutable, gaterun.Errno(err), err.Error())
		return
	}
	if m != nil {
		defer m.Close()
	}
	exited := make(chan syscall.WaitStatus, 1)
	agentGate.mu.Lock()
	pid, err := syscall.ForkExec(prog, a.Argv, &syscall.ProcAttr{Dir: a.Cwd, Env: env,
		Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err == nil {
		agentGate.waiters[pid] = exited
	}
	agentGate.mu.Unlock()
	if err != nil {
		errno := errnoOf(err)
		code := wire.CodeNotExecutable
		switch errno {
		case unix.ENOENT:
			code = wire.CodeNotFound
		case unix.EAGAIN, unix.ENOMEM:
			code = wire.CodeNoResources
		}
		fail(code, errno, fmt.Sprintf("%s: %v", a.Argv[0], err))
		return
	}
	if a.NProc > 0 {
		// runsc: the pids limit is RLIMIT_NPROC (see the oci package). Set
		// right after the start; the fork the command may make before it
		// stays within the sandbox's host backstop.
		_ = unix.Prlimit(pid, unix.RLIMIT_NPROC, &unix.Rlimit{Cur: a.NProc, Max: a.NProc}, nil)
	}
	closeFiles(files)
	files = nil
	reply("started " + strconv.Itoa(pid))
	reply("exited " + strconv.Itoa(int(<-exited)))
}

// gateExecMain is the front of an approved exec: args are the nonce and
// the agent's gate socket. It reports the start and copies the output the
// way execMain does, but the agent forks the command.
func gateExecMain(args []string) int {
	if len(args) != 2 || args[0] == "" {
		fmt.Fprintln(os.Stderr, "ironclaw: oci helper gate-exec: want nonce and socket")
		return wire.HelperExitRefused
	}
	stdout, stderr := pollable(1, "stdout"), pollable(2, "stderr")
	marker := wire.Marker(args[0])
	fail := func(code string, errno syscall.Errno, text string) int {
		fmt.Fprintf(stderr, "%sfailed %s %d %s\n", marker, code, int(errno), strings.ReplaceAll(text, "\n", " "))
		if code == wire.CodeNotFound {
			return 127
		}
		return 126
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(wire.CodeNoResources, errnoOf(err), fmt.Sprintf("pipe: %v", err))
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(wire.CodeNoResources, errnoOf(err), fmt.Sprintf("pipe: %v", err))
	}
	nc, err := net.Dial("unix", "@"+args[1])
	if err != nil {
		return fail(wire.CodeBadRequest, errnoOf(err), fmt.Sprintf("the sandbox's gate: %v", err))
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	_, _, err = c.WriteMsgUnix([]byte("run "+args[0]+"\n"), unix.UnixRights(0, int(outW.Fd()), int(errW.Fd())), nil)
	outW.Close()
	errW.Close()
	if err != nil {
		return fail(wire.CodeBadRequest, errnoOf(err), fmt.Sprintf("the sandbox's gate: %v", err))
	}
	rd := bufio.NewReader(io.LimitReader(c, 4096))
	line, err := rd.ReadString('\n')
	h, herr := wire.ParseHeader(strings.TrimSuffix(line, "\n"))
	switch {
	case err != nil || herr != nil:
		return fail(wire.CodeBadRequest, unix.EIO, "the sandbox's gate did not answer")
	case !h.Started:
		return fail(h.Code, syscall.Errno(h.Errno), h.Text)
	}
	fmt.Fprintf(stderr, "%sstarted %d\n", marker, h.Pid)

	var copiers sync.WaitGroup
	copiers.Add(2)
	go copyOut(&copiers, stdout, outR)
	go copyOut(&copiers, stderr, errR)
	line, err = rd.ReadString('\n')
	status, serr := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "exited "))
	by := time.Now().Add(afterExit)
	_ = outR.SetReadDeadline(by)
	_ = errR.SetReadDeadline(by)
	copiers.Wait()
	if err != nil || serr != nil || !strings.HasPrefix(line, "exited ") {
		fmt.Fprintf(stderr, "ironclaw: oci helper gate-exec: the sandbox's gate hung up\n")
		return wire.HelperExitRefused
	}
	ws := syscall.WaitStatus(status)
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 128 + int(syscall.SIGKILL)
}
