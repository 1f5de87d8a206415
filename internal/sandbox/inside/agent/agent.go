package agent

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// agentMain: args are the exposed ports.
func agentMain(args []string) int {
	if os.Getpid() != 1 {
		fmt.Fprintf(os.Stderr, "ironclaw: oci agent refused to run: not pid 1 of a pid namespace (pid %d)\n", os.Getpid())
		return wire.HelperExitRefused
	}
	// Not dumpable: commands run as the same uid and must not read the
	// agent's memory, environment or descriptors through /proc/1.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// Few threads: they count against the sandbox's pids limit (the agent
	// itself has no RLIMIT_NPROC, but on runc and crun the pids cgroup
	// holds it too, and a Go program that cannot make a thread dies). Its
	// work is all poller-driven; one P is plenty.
	runtime.GOMAXPROCS(1)
	ignoreSignals()
	go reap()

	ports := make([]uint16, 0, len(args))
	for _, a := range args {
		p, err := strconv.ParseUint(a, 10, 16)
		if err != nil || p == 0 {
			fmt.Fprintf(os.Stderr, "ironclaw: oci agent: bad port %q\n", a)
			return 1
		}
		ports = append(ports, uint16(p))
	}
	ctl, err := dialCtl()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: oci agent: control socket: %v\n", err)
		return 1
	}
	if err := receiveGate(ctl); err != nil {
		fmt.Fprintf(ctl, "%s gate: %v\n", wire.MsgFailed, err)
		return 1
	}
	for _, p := range ports {
		l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			fmt.Fprintf(ctl, "%s exposed port %d: %v\n", wire.MsgFailed, p, err)
			return 1
		}
		go forward(l, path.Join(wire.SockDir, wire.PortSock(p)))
	}
	if _, err := fmt.Fprintf(ctl, "%s\n", wire.MsgReady); err != nil {
		return 1
	}
	serveCtl(ctl)
	return 0
}

// dialCtl connects to the daemon's control socket, retrying briefly: the
// runtime may start us a moment before the daemon listens (it never does
// today, but a retry costs nothing and a race would cost a sandbox).
func dialCtl() (net.Conn, error) {
	var last error
	for i := 0; i < 50; i++ {
		c, err := net.Dial("unix", path.Join(wire.SockDir, wire.CtlSock))
		if err == nil {
			return c, nil
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return nil, last
}

// serveCtl runs the daemon's requests until it hangs up.
func serveCtl(ctl net.Conn) {
	s := bufio.NewScanner(ctl)
	s.Buffer(make([]byte, 4096), wire.MaxCtlLine)
	for s.Scan() {
		word, arg, _ := strings.Cut(s.Text(), " ")
		switch word {
		case wire.MsgArm, wire.MsgDisarm:
			gateCtl(word, arg)
		case wire.MsgKill:
			// Only process groups: pgid 1 (us) and "all" (-1) are refused.
			if pgid, err := strconv.Atoi(arg); err == nil && pgid > 1 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		case wire.MsgOOM:
			killLargest()
		}
	}
}

// forward accepts on an exposed port and splices each connection to the
// daemon's unix socket for that port.
func forward(l net.Listener, sock string) {
	for {
		c, err := l.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and friends: back off
			continue
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("unix", sock)
			if err != nil {
				return
			}
			defer u.Close()
			splice(c.(*net.TCPConn), u.(*net.UnixConn))
		}()
	}
}

type halfCloser interface {
	io.ReadWriter
	CloseWrite() error
}

// splice copies both ways, passing each side's end of stream on as a
// half-close so request/response protocols see EOF where they expect it.
func splice(a, b halfCloser) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src halfCloser) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

// ignoreSignals keeps code inside the sandbox from killing its pid 1. The
// kernel drops a signal sent from inside to a pid-namespace init unless the
// init handles it, and the Go runtime handles the ones that would exit,
// dump or panic; catching them (not SIG_IGN, which commands would inherit
// across exec) makes them no-ops. Commands are not our children (the
// runtime starts them), so SIGCHLD is only for orphans we reap.
func ignoreSignals() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGTERM, syscall.SIGSTKFLT,
		syscall.SIGSYS, syscall.SIGPIPE, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for range c {
		}
	}()
}

// reap collects orphans reparented to pid 1: processes a command left
// behind when it exited.
func reap() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGCHLD)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
			gateReaped(pid, ws)
		}
		<-c
	}
}

// killLargest is the OOM killer of a sandbox whose memory the host cannot
// take back by killing one process (runsc: every process's memory is the
// sentry's, which the host OOM killer would end as a whole). The daemon
// watches the sandbox's memory and asks for it; like the kernel's, it
// SIGKILLs the process with the largest resident set, never pid 1.
func killLargest() {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	victim, most := 0, int64(0)
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid <= 1 {
			continue
		}
		b, err := os.ReadFile("/proc/" + de.Name() + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		if rss, err := strconv.ParseInt(f[1], 10, 64); err == nil && rss > most {
			victim, most = pid, rss
		}
	}
	if victim > 1 {
		_ = syscall.Kill(victim, syscall.SIGKILL)
	}
}
