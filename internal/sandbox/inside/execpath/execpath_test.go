package execpath

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLook(t *testing.T) {
	d := t.TempDir()
	exe := filepath.Join(d, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	plain := filepath.Join(d, "plain")
	os.WriteFile(plain, []byte("x"), 0o644)
	os.Mkdir(filepath.Join(d, "dir"), 0o755)
	env := []string{"PATH=" + d}
	for name, want := range map[string]unix.Errno{
		"tool": 0, exe: 0, "missing": unix.ENOENT, plain: unix.EACCES, "plain": unix.EACCES, "dir": unix.EISDIR,
	} {
		p, errno := Look(name, env)
		if errno != want {
			t.Errorf("Look(%q) = %q, %v; want %v", name, p, errno, want)
		}
		if want == 0 && p != exe {
			t.Errorf("Look(%q) = %q, want %q", name, p, exe)
		}
	}
}
