package boot

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/steward"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// programs are pid 1's two programs, open since before the root was
// replaced (package steward): the steward, and this Go agent.
type programs struct {
	steward, agent *os.File
}

// keepPrograms opens this binary beside the steward the daemon sent and
// lets the seal's landlock domain execute both (and nothing else by
// them). It runs before the root is replaced, while /proc/self/exe still
// leads to this binary. A sandbox with gated programs keeps the Go agent
// throughout (the steward has no gate table): it gets nil, as does a
// failure, after which this agent simply stays pid 1.
func keepPrograms(cfg *wire.Config, stewardExe *os.File) *programs {
	if len(cfg.Gate) > 0 {
		stewardExe.Close()
		return nil
	}
	fd, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: sandbox init: the steward is not used: %v\n", err)
		stewardExe.Close()
		return nil
	}
	p := &programs{steward: stewardExe, agent: os.NewFile(uintptr(fd), "agent")}
	cfg.Seal.Landlock.ExecFiles = []int{int(p.steward.Fd()), int(p.agent.Fd())}
	return p
}

// toSteward executes the steward in this program's place, handing it
// conn, the programs, pid 1's oom_score_adj file and runs (the commands
// not yet reaped). It runs on the main thread, with nothing else under
// way that the execve would cut short (see agent.idle). It returns only
// when the execve failed, after saying why on stderr; conn is still
// usable then.
func toSteward(conn *wire.Conn, p *programs, runs []steward.Run) {
	ctl, err := conn.FD()
	if err == nil {
		h := &steward.Handover{Ctl: ctl, Steward: int(p.steward.Fd()), Agent: int(p.agent.Fd()), Runs: runs}
		if initOOM.f != nil {
			h.OOM = &steward.OOM{FD: int(initOOM.f.Fd()), Own: string(initOOM.own), Workload: string(initOOM.workload)}
		}
		err = steward.Exec(h.Steward, "ironclaw-steward", h.Args(), os.Environ(), h.FDs())
	}
	fmt.Fprintf(os.Stderr, "ironclaw: sandbox init: the steward did not start, this agent stays pid 1: %v\n", err)
}

// resume is pid 1 handed back by the steward for a request it does not
// serve (still unread on the socket). The sandbox was built and sealed
// by the init this process once was; resume checks that it still is, then
// serves as that init did, and hands pid 1 back once idle.
func resume() {
	h, err := steward.Parse(os.Args[1:])
	if err == nil {
		err = checkFreshNamespaces(h.Ctl)
	}
	if err == nil {
		err = verifySealed()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: sandbox agent refused to resume: %v\n", err)
		os.Exit(ExitRefused)
	}
	for _, fd := range h.FDs() {
		unix.CloseOnExec(fd)
	}
	ignoreSignals()
	conn, err := wire.NewConn(os.NewFile(uintptr(h.Ctl), "ctl"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "ironclaw: sandbox agent: %v\n", err)
		os.Exit(1)
	}
	if h.OOM != nil {
		initOOM = oomAdj{f: os.NewFile(uintptr(h.OOM.FD), "oom_score_adj"), own: []byte(h.OOM.Own), workload: []byte(h.OOM.Workload)}
	}
	progs := &programs{steward: os.NewFile(uintptr(h.Steward), "steward"), agent: os.NewFile(uintptr(h.Agent), "agent")}
	serve(conn, h.Runs, progs, time.Now().Add(steward.IdleBeforeSteward))
	os.Exit(0)
}

// handToSteward hands pid 1 to the steward once the agent has been idle
// for steward.IdleBeforeSteward (the reader's deadline). The reader calls
// it between requests, so no request is ever read and dropped, and only
// with no file operation under way; the job runs on the main thread, after
// any fork queued before it, and holds a.mu, so no exit is reaped and left
// unreported. It returns only if the steward did not start; the agent
// then stays pid 1 for good.
func (a *agent) handToSteward() {
	done := make(chan struct{})
	a.onMain <- func() {
		defer close(done)
		a.mu.Lock()
		defer a.mu.Unlock()
		runs := make([]steward.Run, 0, len(a.running))
		for pid, id := range a.running {
			runs = append(runs, steward.Run{Pid: pid, ID: id})
		}
		toSteward(a.conn, a.progs, runs)
	}
	<-done
	a.progs = nil
	_ = a.conn.SetReadDeadline(time.Time{})
}

// kickReaper makes the reaper look for children once, for those that
// exited while another program was pid 1.
func kickReaper(sigc chan os.Signal) {
	select {
	case sigc <- syscall.SIGCHLD:
	default:
	}
}
