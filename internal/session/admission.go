package session

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Capacity is what all sandboxes together may commit: the sum of their
// memory, CPU and PID limits stays within it, so that a sandbox's limits
// are a promise the host can keep. Zero fields are not checked.
type Capacity struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
}

// Quotas bound what one principal, and one sandbox, may hold at once.
// Zero fields are not checked.
type Quotas struct {
	// SandboxesPerPrincipal bounds running sandboxes per principal.
	SandboxesPerPrincipal int
	// ExecsPerPrincipal bounds execs and file copies in flight across a
	// principal's sandboxes (counted against the sandbox's creator, so a
	// spawned agent's work counts against whoever asked for it).
	ExecsPerPrincipal int
	// ExecsPerSandbox bounds execs and file copies in flight in one
	// sandbox.
	ExecsPerSandbox int
}

// Host reserves: what the daemon keeps for itself and the host's own
// processes before anything is promised to sandboxes.
const (
	hostMemoryReserve = 1 << 30
	hostMemoryShare   = 0.10 // or this share of the host's memory, if more
	hostPidsReserve   = 4096
)

// HostCapacity reads what this host has (memory, CPUs the daemon may use,
// process slots) and scales each by its overcommit factor, after keeping a
// reserve for the daemon and the host.
func HostCapacity(overMemory, overCPUs, overPids float64) (Capacity, error) {
	mem, err := memTotal()
	if err != nil {
		return Capacity{}, err
	}
	reserve := max(int64(hostMemoryReserve), int64(float64(mem)*hostMemoryShare))
	pids, err := pidSlots()
	if err != nil {
		return Capacity{}, err
	}
	return Capacity{
		MemoryBytes: int64(float64(max(mem-reserve, mem/2)) * overMemory),
		CPUs:        float64(runtime.NumCPU()) * overCPUs,
		Pids:        int64(float64(max(pids-hostPidsReserve, pids/2)) * overPids),
	}, nil
}

func memTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("session: host memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("session: host memory: %q: %w", sc.Text(), err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("session: host memory: no MemTotal in /proc/meminfo")
}

// pidSlots is the smaller of the kernel's pid and thread ceilings.
func pidSlots() (int64, error) {
	var out int64
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("session: host pids: %w", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("session: host pids: %s: %w", f, err)
		}
		if out == 0 || n < out {
			out = n
		}
	}
	return out, nil
}

// commitment is what one sandbox holds of the host's capacity.
type commitment struct {
	memory int64
	cpus   float64
	pids   int64
}

func commitmentOf(l sandbox.Limits) commitment {
	return commitment{memory: l.MemoryBytes, cpus: l.CPUs, pids: l.Pids}
}

// admitLocked checks that one more sandbox of principal, committing c,
// fits the capacity and the principal's quota, and if so reserves it.
// m.mu must be held.
func (m *Manager) admitLocked(principal string, c commitment) error {
	if len(m.live)+m.starting >= m.opts.MaxSandboxes {
		return fmt.Errorf("%w: %d running or starting, the daemon's maximum", ErrLimit, m.opts.MaxSandboxes)
	}
	q := m.opts.Quotas
	if q.SandboxesPerPrincipal > 0 && m.perPrincipal[principal] >= q.SandboxesPerPrincipal {
		return fmt.Errorf("%w: %s has %d sandboxes running or starting, its quota", ErrLimit, principal, q.SandboxesPerPrincipal)
	}
	capa, used := m.opts.Capacity, m.committed
	switch {
	case capa.MemoryBytes > 0 && used.memory+c.memory > capa.MemoryBytes:
		return fmt.Errorf("%w: the host's memory is committed (%s of %s promised to sandboxes; this one asks %s)",
			ErrLimit, sandbox.FormatBytes(used.memory), sandbox.FormatBytes(capa.MemoryBytes), sandbox.FormatBytes(c.memory))
	case capa.CPUs > 0 && used.cpus+c.cpus > capa.CPUs+1e-9:
		return fmt.Errorf("%w: the host's CPUs are committed (%g of %g promised to sandboxes; this one asks %g)", ErrLimit, used.cpus, capa.CPUs, c.cpus)
	case capa.Pids > 0 && used.pids+c.pids > capa.Pids:
		return fmt.Errorf("%w: the host's process slots are committed (%d of %d promised to sandboxes; this one asks %d)", ErrLimit, used.pids, capa.Pids, c.pids)
	}
	m.committed = used.add(c)
	m.perPrincipal[principal]++
	return nil
}

// releaseLocked returns what admitLocked reserved. m.mu must be held.
func (m *Manager) releaseLocked(principal string, c commitment) {
	m.committed = m.committed.add(commitment{-c.memory, -c.cpus, -c.pids})
	if m.perPrincipal[principal]--; m.perPrincipal[principal] <= 0 {
		delete(m.perPrincipal, principal)
	}
}

// recommitLocked changes a running sandbox's commitment from old to new
// (its limits were widened), if the host has room. m.mu must be held.
func (m *Manager) recommitLocked(old, new commitment) error {
	capa := m.opts.Capacity
	next := m.committed.add(commitment{new.memory - old.memory, new.cpus - old.cpus, new.pids - old.pids})
	switch {
	case capa.MemoryBytes > 0 && new.memory > old.memory && next.memory > capa.MemoryBytes:
		return fmt.Errorf("%w: the host's memory is committed (%s of %s promised to sandboxes)", ErrLimit,
			sandbox.FormatBytes(m.committed.memory), sandbox.FormatBytes(capa.MemoryBytes))
	case capa.CPUs > 0 && new.cpus > old.cpus && next.cpus > capa.CPUs+1e-9:
		return fmt.Errorf("%w: the host's CPUs are committed (%g of %g promised to sandboxes)", ErrLimit, m.committed.cpus, capa.CPUs)
	case capa.Pids > 0 && new.pids > old.pids && next.pids > capa.Pids:
		return fmt.Errorf("%w: the host's process slots are committed (%d of %d promised to sandboxes)", ErrLimit, m.committed.pids, capa.Pids)
	}
	m.committed = next
	return nil
}

func (c commitment) add(d commitment) commitment {
	return commitment{c.memory + d.memory, c.cpus + d.cpus, c.pids + d.pids}
}

// startUseLocked counts one exec or file copy of entry e against the
// quotas. m.mu must be held.
func (m *Manager) startUseLocked(id string, e *entry) error {
	q := m.opts.Quotas
	if q.ExecsPerSandbox > 0 && e.busy >= q.ExecsPerSandbox {
		return fmt.Errorf("%w: sandbox %s has %d commands and file copies in flight, its quota", ErrLimit, id, q.ExecsPerSandbox)
	}
	p := e.info.Principal
	if q.ExecsPerPrincipal > 0 && m.execsPerPrincipal[p] >= q.ExecsPerPrincipal {
		return fmt.Errorf("%w: %s has %d commands and file copies in flight, its quota", ErrLimit, p, q.ExecsPerPrincipal)
	}
	e.busy++
	m.execsPerPrincipal[p]++
	return nil
}

func (m *Manager) endUseLocked(e *entry) {
	e.busy--
	p := e.info.Principal
	if m.execsPerPrincipal[p]--; m.execsPerPrincipal[p] <= 0 {
		delete(m.execsPerPrincipal, p)
	}
}
