// Package gate keeps the programs a policy gates (exec.gate) from running
// in a sandbox without an operator's approval, however they are spelled,
// on every backend. It is the wall under the API's approval flow; the
// command-line patterns of exec.require_approval are only an advisory in
// front of it.
//
// # The wall
//
// At sandbox start every file of the root that is a gated program is
// masked: a read-only bind mount of a small stub program covers it. The
// daemon finds those files here (Resolve), in the sandbox's own root as the
// sandbox will see it, never the host's: a gated name is looked up in every
// PATH directory, an absolute entry is resolved as the sandbox would
// resolve it, symlinks are followed within the sandbox's root (an image's
// symlink to /etc/x means the sandbox's /etc/x, never the host's), and
// every other path of the root that reaches the same file is masked too:
// another bind of the same host directory, and every hard link. The walk
// opens each directory with O_NOFOLLOW from the one before it, so no host
// symlink is followed either, and the native init reopens every path
// inside the new root and checks it is the same file before it masks it.
// Where that search cannot vouch for every name (a hard link too deep or
// unreadable to search), the create fails rather than leave one open. So no
// spelling reaches the program's bytes: /usr/bin/curl, curl through PATH,
// c'u'rl, env curl, sh -c 'x=cu; ${x}rl', exec -a, a symlink in
// /workspace, a copy (cp copies the stub), a hard link (the writable areas
// are other mounts: EXDEV), the ELF loader run as a program
// (/lib64/ld-linux-x86-64.so.2 /usr/bin/curl maps the stub, not curl), and
// python or perl exec'ing it all reach the stub, which writes
//
//	ironclaw: curl needs approval (exec.gate): ...
//
// to stderr and exits 126. On amd64 the stub is a 300-byte static ELF
// program, so it runs in any root; elsewhere it is a /bin/sh script.
//
// Masking by file was chosen over the alternatives tried here. Landlock's
// execute right (denied on curl alone, granted file by file on the rest of
// /usr/bin) stops execve of /usr/bin/curl, but not
// /lib64/ld-linux-x86-64.so.2 /usr/bin/curl, which opens and maps it as a
// library, nor a copy run the same way; it is checked at execve only, and
// a directory symlink such as Debian's /usr/bin/X11 -> . quietly grants
// the whole directory. Seccomp user notification reads execve's path from
// the caller's memory, which another thread may change after the check
// (TOCTOU), and the loader and copy tricks need no execve of the file at
// all. A mask takes the bytes away, which answers all of them at once, on
// native, runc, runsc and Docker alike.
//
// # An approved run
//
// The sandbox's pid 1 (the native init, or the OCI/Docker helper's agent)
// holds each gated program's real file open from before the masking; it is
// not dumpable, so nothing inside can take the descriptor. An exec that
// the API let through with an approval carries the program's key
// (sandbox.ExecRequest.Gate). pid 1 resolves the command's argv[0]; when it
// reaches the stub of that key, and only then, it copies the real file into
// an anonymous memory file of mode 0111 (Runnable) and starts exactly that
// exec's argv from it, with the loader's variables removed from the
// environment (SafeEnv), so no library the agent wrote is loaded into it.
// A file its user cannot read makes the kernel start the process not
// dumpable: other processes of the sandbox cannot open its /proc/PID/exe,
// mem or fds to copy the program while it runs. (gVisor refuses to exec an
// unreadable file; there the copy is 0555, and the sentry denies
// /proc/PID/exe and mem of another process anyway.) Only the top-level
// program is lifted: what it starts, including itself by path, meets the
// stubs.
//
// # What the gate does not stop
//
// It gates files, not capabilities. A program that does the same job under
// another file stays runnable: a multi-call binary (busybox wget; Resolve
// refuses to gate a name that is busybox under another name, since that
// would gate every applet), an interpreter's own HTTP client (python's
// urllib, perl's IO::Socket), a library the program is built on (libcurl
// through python's ctypes), a program the agent writes or builds itself,
// or a copy of the program's bytes brought in some other way. Gating a
// script masks its text, but its interpreter stays runnable (an agent that
// knows the text runs it that way), and an approved run of a script is
// refused (ErrScript): its interpreter would need the script's descriptor.
// An approved program still reads its own configuration from the sandbox
// (curl's ~/.curlrc lives in /workspace), and an approved interpreter runs
// whatever it is given, a copy of itself included: approve with that in
// mind. Only the argv and the output mode are bound, not the environment
// (beyond SafeEnv), the directory or stdin. What keeps a sandbox off the
// network is the egress broker, not the gate.
package gate

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// MaxPrograms bounds a policy's gate list, and MaxPaths the paths one
// sandbox's root may need masked in all: each is a mount.
const (
	MaxPrograms = 64
	MaxPaths    = 512
)

// Key is the name an approval gives a gated program: the base name of its
// gate entry ("curl", or "ssh" for "/usr/bin/ssh"). The API derives it from
// an exec's argv[0] the same way.
func Key(entry string) string { return path.Base(entry) }

// CheckEntry validates one gate entry: a program name (no slash) or a
// clean absolute path outside the sandbox's own areas.
func CheckEntry(e string) error {
	switch {
	case e == "" || e == "." || e == ".." || strings.ContainsAny(e, "\x00\n"):
		return fmt.Errorf("%q is not a program name or path", e)
	case !strings.Contains(e, "/"):
		return nil
	case !path.IsAbs(e) || path.Clean(e) != e || e == "/":
		return fmt.Errorf("%q must be a program name or a clean absolute path", e)
	}
	for _, a := range opaqueAreas {
		if e == a || strings.HasPrefix(e, a+"/") {
			return fmt.Errorf("%q lies in %s, which the sandbox makes itself: only files of its root can be gated", e, a)
		}
	}
	return nil
}

// Program is one gated file of a sandbox's root.
type Program struct {
	// Keys are the approval names that may run it (usually one; two
	// entries can resolve to the same file).
	Keys []string
	// Paths are every path inside the sandbox that reaches the file,
	// symlink-free: each gets the stub mounted over it.
	Paths []string
	// Dev and Ino identify the file on the host (a bind keeps them).
	Dev, Ino uint64
	// Size is the file's size when it was resolved.
	Size int64
	// file is the real file, opened read-only by the resolution.
	file *os.File
}

// File is the real program, open read-only: the OCI and Docker backends
// pass it to the sandbox's agent. The Plan owns it.
func (p *Program) File() *os.File { return p.file }

// Plan is what Resolve found for one sandbox. Close it once the sandbox
// holds what it needs (or creation failed).
type Plan struct {
	Programs []Program
}

// Paths counts the paths to mask.
func (p *Plan) Paths() int {
	n := 0
	for _, g := range p.Programs {
		n += len(g.Paths)
	}
	return n
}

// Close closes the real files.
func (p *Plan) Close() {
	if p == nil {
		return
	}
	for i := range p.Programs {
		if f := p.Programs[i].file; f != nil {
			f.Close()
			p.Programs[i].file = nil
		}
	}
}

// Message is what a stub writes when run.
func Message(key string) string {
	return fmt.Sprintf("ironclaw: %s needs approval (exec.gate): run it as the command of an exec (argv[0] %q) "+
		"through the IronClaw API to ask an operator; started any other way it does not run\n", key, key)
}

// fdReserve is what pid 1 needs beside the real files it holds: its
// control connection and the descriptors of the commands in flight.
const fdReserve = 16

// CheckFDs refuses a plan whose real files would leave pid 1 too few
// descriptors under the sandbox's RLIMIT_NOFILE (it holds one per
// program for the sandbox's life).
func (p *Plan) CheckFDs(openFiles int64) error {
	if p == nil || len(p.Programs) == 0 {
		return nil
	}
	if int64(len(p.Programs)+fdReserve) > openFiles {
		return fmt.Errorf("%w: open files %d is too few for the %d gated programs the sandbox's pid 1 holds open (at least %d)",
			sandbox.ErrInvalidSpec, openFiles, len(p.Programs), len(p.Programs)+fdReserve)
	}
	return nil
}
