package gaterun

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestSafeEnv(t *testing.T) {
	got := SafeEnv([]string{"PATH=/bin", "LD_PRELOAD=/workspace/x.so", "LD_LIBRARY_PATH=/w", "GCONV_PATH=/w", "GLIBC_TUNABLES=x", "HOME=/workspace", "TMPDIR=/tmp"})
	if want := []string{"PATH=/bin", "HOME=/workspace", "TMPDIR=/tmp"}; !slices.Equal(got, want) {
		t.Fatalf("SafeEnv = %v, want %v", got, want)
	}
}

// Approved lifts the gate only for the stub of the approved key.
func TestTableApproved(t *testing.T) {
	dir := t.TempDir()
	stub, other, plain := filepath.Join(dir, "stub"), filepath.Join(dir, "other"), filepath.Join(dir, "plain")
	for _, p := range []string{stub, other, plain} {
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tab := NewTable()
	real := &Real{Keys: []string{"curl"}}
	for p, r := range map[string]*Real{stub: real, other: {Keys: []string{"wget"}}} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		tab.Add(uint64(st.Dev), st.Ino, r)
	}
	if r, err := tab.Approved(stub, "/", "curl"); r != real || err != nil {
		t.Errorf("the approved stub: %v %v", r, err)
	}
	if r, err := tab.Approved("stub", dir, "curl"); r != real || err != nil {
		t.Errorf("relative: %v %v", r, err)
	}
	if _, err := tab.Approved(other, "/", "curl"); !errors.Is(err, ErrOther) {
		t.Errorf("another gated program: %v", err)
	}
	if r, err := tab.Approved(plain, "/", "curl"); r != nil || err != nil {
		t.Errorf("an ungated program: %v %v", r, err)
	}
}

// An approved run of a script is refused rather than handing its
// interpreter a descriptor the sandbox could reuse.
func TestRunnableScript(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := (&Real{Keys: []string{"s"}, File: f}).Runnable("s", false); !errors.Is(err, ErrScript) {
		t.Fatalf("Runnable(script) = %v", err)
	}
}
