// Package gaterun is the in-sandbox half of the exec gate (see package
// gate for the wall and the threat model): what a sandbox's pid 1 (the
// native init, or the container helper's agent) does for an approved run.
// pid 1 holds each gated program's real file open from before the masking
// (Table); for an exec the daemon says was approved, it checks argv[0]
// reaches that program's stub and runs the real program from an anonymous
// memory copy its user cannot read (Run), with the loader's variables
// removed from the environment (SafeEnv).
package gaterun

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Table is what pid 1 knows of the gate: for each stub's identity inside
// the sandbox (every path it covers), the program and its real file.
type Table struct {
	stubs map[[2]uint64]*Real
}

// Real is one gated program as pid 1 holds it.
type Real struct {
	Keys []string
	File *os.File // the real program, read-only, close-on-exec
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{stubs: map[[2]uint64]*Real{}} }

// Add records that the file at dev/ino (a stub's mount) stands for r.
func (t *Table) Add(dev, ino uint64, r *Real) { t.stubs[[2]uint64{dev, ino}] = r }

// Empty reports whether nothing is gated.
func (t *Table) Empty() bool { return t == nil || len(t.stubs) == 0 }

// Errors of Approved.
var (
	// ErrOther: argv[0] reaches the stub of a gated program other than
	// the one approved.
	ErrOther = errors.New("the approval is for another program")
	// ErrScript: the gated program is a script, which an approved run
	// cannot start (see Runnable).
	ErrScript = errors.New("an approved run cannot start a script")
)

// Approved is the check pid 1 makes before an approved run: prog is what
// argv[0] resolved to (relative ones against cwd) and key the program the
// approval names. It returns the program's real file when prog is that
// program's stub, nil when prog is no gated program (it runs as it is, the
// gate has nothing to lift), and ErrOther when it is another's stub.
func (t *Table) Approved(prog, cwd, key string) (*Real, error) {
	if t.Empty() {
		return nil, nil
	}
	if !strings.HasPrefix(prog, "/") {
		prog = cwd + "/" + prog
	}
	var st unix.Stat_t
	if err := unix.Stat(prog, &st); err != nil {
		return nil, nil // it will fail to start the ordinary way
	}
	r, ok := t.stubs[[2]uint64{st.Dev, st.Ino}]
	if !ok {
		return nil, nil
	}
	for _, k := range r.Keys {
		if k == key {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: %s is the gated %s, the approval is for %s", ErrOther, prog, r.Keys[0], key)
}

// Runnable copies the real program into an anonymous memory file that an
// exec can run and nothing can read, and returns it (close-on-exec; the
// caller closes it once the command started). Mode 0111: the process that
// runs it is not dumpable, because its own user cannot read the file, so
// nothing else in the sandbox can open its /proc/PID/exe or mem. readable
// (gVisor, which refuses to exec a file it cannot read) makes it 0555.
func (r *Real) Runnable(name string, readable bool) (*os.File, error) {
	var magic [2]byte
	if n, _ := r.File.ReadAt(magic[:], 0); n == 2 && string(magic[:]) == "#!" {
		// Its interpreter would open the script by a path to our copy,
		// which it cannot read, and which must not be left open to it.
		return nil, fmt.Errorf("%w: %s is a script; gate its interpreter instead", ErrScript, name)
	}
	fd, err := unix.MemfdCreate("ironclaw-gate:"+name, unix.MFD_CLOEXEC|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate("ironclaw-gate:"+name, unix.MFD_CLOEXEC) // before Linux 6.3
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	m := os.NewFile(uintptr(fd), "ironclaw-gate:"+name)
	var st unix.Stat_t
	if err := unix.Fstat(int(r.File.Fd()), &st); err != nil {
		m.Close()
		return nil, err
	}
	if _, err := io.Copy(m, io.NewSectionReader(r.File, 0, st.Size)); err != nil {
		m.Close()
		return nil, fmt.Errorf("copying the program: %w", err)
	}
	mode := uint32(0o111)
	if readable {
		mode = 0o555
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Run prepares an approved run of argv0, which resolved to prog (relative
// paths against cwd), for the gated program key: when prog is that
// program's stub it returns the path to exec instead (a Runnable copy of
// the real program), env without the loader's variables, and the copy,
// which the caller closes once the command started. A prog that is no
// gated program comes back unchanged with a nil file; another program's
// stub is ErrOther.
func (t *Table) Run(argv0, prog, cwd, key string, env []string, readable bool) (string, []string, *os.File, error) {
	r, err := t.Approved(prog, cwd, key)
	if err != nil || r == nil {
		return prog, env, nil, err
	}
	f, err := r.Runnable(key, readable)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: the approved program cannot be prepared: %w", argv0, err)
	}
	return ExecPath(f), SafeEnv(env), f, nil
}

// ExecPath is the path pid 1 execs a Runnable through.
func ExecPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// unsafeEnv are the variables glibc's loader and libc drop for set-uid
// programs (sysdeps/generic/unsecvars.h), less TMPDIR: each can load code
// (a library, a gconv module, a tunable) into the program.
var unsafeEnv = []string{"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
	"MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"}

// SafeEnv is env without the loader's variables (LD_*) and the others
// glibc drops for set-uid programs: an approved run must run the approved
// program, not a library the agent wrote into /workspace.
func SafeEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LD_") || contains(unsafeEnv, k) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Errno is the errno an approved run's failure reports (126: cannot
// execute).
func Errno(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return unix.EACCES
}
