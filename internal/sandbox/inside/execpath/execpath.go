// Package execpath finds the program a command names, inside a sandbox,
// before it is started, so every backend's pid 1 reports "not found" (127)
// and "cannot execute" (126) the same way.
package execpath

import (
	"errors"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Look resolves name the way execvp would, with the command's own PATH
// (from env), and says why it cannot run: ENOENT (exit 127), or EACCES or
// EISDIR (exit 126).
func Look(name string, env []string) (string, syscall.Errno) {
	if strings.Contains(name, "/") {
		return name, checkExecutable(name)
	}
	pathEnv := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := syscall.Errno(0)
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := path.Join(dir, name)
		switch errno := checkExecutable(p); errno {
		case 0:
			return p, 0
		case unix.EACCES, unix.EISDIR:
			denied = errno
		}
	}
	if denied != 0 {
		return "", denied
	}
	return "", unix.ENOENT
}

func checkExecutable(p string) syscall.Errno {
	st, err := os.Stat(p)
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) {
			return en
		}
		return unix.ENOENT
	}
	if st.IsDir() {
		return unix.EISDIR
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return unix.EACCES
	}
	return 0
}
