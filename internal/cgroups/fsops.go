package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fsOps are the three operations whose semantics on cgroupfs differ from a
// plain directory tree: mkdir populates control files, rmdir succeeds on a
// directory full of control files, and writes are validated by the kernel.
// Tests substitute a simulation of those semantics over a temporary
// directory; reads always go straight to the file system.
type fsOps struct {
	mkdir func(path string) error
	rmdir func(path string) error
	write func(path, data string) error
}

func hostOps() fsOps {
	return fsOps{
		mkdir: func(p string) error { return os.Mkdir(p, 0o755) },
		rmdir: func(p string) error {
			// os.Remove would try unlink first; cgroup dirs only rmdir.
			if err := unix.Rmdir(p); err != nil {
				return &fs.PathError{Op: "rmdir", Path: p, Err: err}
			}
			return nil
		},
		write: writeControlFile,
	}
}

// sysEnv is everything detection looks at, injectable for tests.
type sysEnv struct {
	mountinfo []byte // contents of /proc/self/mountinfo
	cgroup    []byte // contents of /proc/self/cgroup
	root      string // prefix for every mount point; "" on a real system
	pid       int    // the calling process, moved on v2 when needed
	ops       fsOps
	// folderOverride replaces "ironclaw" so that tests running next to
	// a real daemon (or to each other) never share its folder.
	folderOverride string
}

func (e sysEnv) folder() string {
	if e.folderOverride != "" {
		return e.folderOverride
	}
	return folderName
}

// writeControlFile writes data to an existing control file in one write(2)
// (the kernel parses each write separately). It never creates the file: a
// missing control file means a missing controller or kernel feature.
func writeControlFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(data)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q: %w", data, werr)
	}
	if cerr != nil {
		return fmt.Errorf("write %q: %w", data, cerr)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readInt reads a file holding a single integer ("max" reads as -1).
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// readIntOptional is readInt that reads a missing file as 0, for counters
// older kernels lack.
func readIntOptional(path string) (int64, error) {
	v, err := readInt(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return v, err
}

// readKeyed reads the value of key from a flat-keyed file ("key value" per
// line). A missing key reads as 0: older kernels lack some counters.
func readKeyed(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := parseKeyed(b, key)
	if err != nil {
		return 0, fmt.Errorf("parse %s %s: %w", path, key, err)
	}
	return n, nil
}

// parseKeyed finds key in the contents of a flat-keyed file.
func parseKeyed(b []byte, key string) (int64, error) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok || string(k) != key {
			continue
		}
		return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	}
	return 0, nil
}

// readPids reads a cgroup.procs file. Pids of processes outside our pid
// namespace read as 0 and are skipped.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		if p > 0 {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// readSet reads a space-separated list file such as cgroup.controllers.
func readSet(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, f := range strings.Fields(string(b)) {
		set[f] = true
	}
	return set, nil
}
