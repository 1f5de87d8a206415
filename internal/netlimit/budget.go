package netlimit

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Budget is a count of units (connections) shared by listeners. It is safe
// for concurrent use.
type Budget struct {
	max  atomic.Int64
	used atomic.Int64
}

// NewBudget returns a budget of max units.
func NewBudget(max int) *Budget {
	b := &Budget{}
	b.max.Store(int64(max))
	return b
}

// TryAcquire takes one unit if one is free. It never blocks.
func (b *Budget) TryAcquire() bool {
	if b.used.Add(1) > b.max.Load() {
		b.used.Add(-1)
		return false
	}
	return true
}

// Release returns a unit taken by TryAcquire.
func (b *Budget) Release() { b.used.Add(-1) }

// Max is the budget's size.
func (b *Budget) Max() int { return int(b.max.Load()) }

// InUse is how many units are taken.
func (b *Budget) InUse() int { return int(b.used.Load()) }

// SetMax resizes the budget. Units already taken stay taken; above the new
// size, TryAcquire fails until enough are released.
func (b *Budget) SetMax(max int) { b.max.Store(int64(max)) }

// Bounds of the process budget.
const (
	// MinReserve is the least number of descriptors the process budget
	// leaves to the control plane.
	MinReserve = 1024
	// MaxProcessConns caps the process budget whatever the descriptor
	// limit, since every connection also costs memory (a goroutine and
	// buffers, about 16 KiB idle, 80 KiB for a busy tunnel).
	MaxProcessConns = 16384
)

var process = NewBudget(budgetFor(softFileLimit()))

// Process is the budget every in-sandbox listener of this process draws
// from (Config.Budget's default). Its size is derived from the soft
// RLIMIT_NOFILE n: a reserve of max(n/8, MinReserve) descriptors is left
// to the control plane (at least half of n when n is small), and of the
// rest, half may be connections from sandboxes, since each may hold one
// upstream descriptor besides its own (an egress tunnel, a model request);
// at most MaxProcessConns. RaiseFileLimit resizes it.
func Process() *Budget { return process }

func budgetFor(soft uint64) int {
	if soft > 1<<30 {
		soft = 1 << 30
	}
	n := int(soft)
	avail := n - max(n/8, MinReserve)
	if avail < n/2 {
		avail = n / 2
	}
	return min(avail/2, MaxProcessConns)
}

func softFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return lim.Cur
}

// RaiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit, resizes
// Process to match, and returns the soft limit now in force. The daemon
// calls it at start.
//
// A process allowed to (root, CAP_SYS_RESOURCE) first raises the hard
// limit itself to the kernel's ceiling, fs.nr_open: a native sandbox
// holds one of the daemon's descriptors while idle (its control socket),
// a few more while commands run or ports are exposed, and the
// connections to its listeners hold more; the headroom costs nothing and
// raising it needs no sysctl. Elsewhere the hard limit stands (20,000 on
// the project's VM: 10,000 idle sandboxes fit under it).
//
// The Go runtime already raises the soft limit at start (to one below the
// hard limit) and restores the original one in the processes it starts;
// RaiseFileLimit then changes nothing, so that restoring stays in place.
// Only a limit lowered since (or a failed raise), or one raised here, is
// set, and then child processes inherit the raised limit.
func RaiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	var err error
	if ceiling := nrOpen(); lim.Max < ceiling {
		raised := syscall.Rlimit{Cur: ceiling, Max: ceiling}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		} // EPERM: not allowed; the hard limit stands
	}
	if lim.Cur+1 < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	process.SetMax(budgetFor(lim.Cur))
	return lim.Cur, err
}

// nrOpen is fs.nr_open, the most any process's RLIMIT_NOFILE may be; 0
// when it cannot be read.
func nrOpen() uint64 {
	data, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
