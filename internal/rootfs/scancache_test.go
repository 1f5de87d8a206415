package rootfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// forget drops the in-memory scan of host, as a new process starts
// without one.
func forget(host string) {
	altCache.Lock()
	delete(altCache.m, host)
	altCache.Unlock()
}

func planOf(t *testing.T, host string) string {
	t.Helper()
	entries, err := HostView(host, "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(entries); err != nil {
		t.Fatal(err)
	}
	return alternativesOf(t, entries)
}

// A later process takes the kept scan instead of reading the directories
// again, and sees what a scan would.
func TestScanKeptBetweenProcesses(t *testing.T) {
	host := fakeDebian(t)
	ageDirs(t, host)
	file := filepath.Join(t.TempDir(), "cache", "alts")
	want := "awk=/usr/bin/mawk java=/usr/lib/jvm/bin/java mta=/usr/sbin/exim4 nawk=/usr/bin/mawk pager=/usr/bin/less"

	// newProcess is a process's warm-up: it forgets the in-memory scan,
	// takes the kept one or scans, and says how many scans that took.
	newProcess := func() int64 {
		forget(host)
		scans := altScans.Load()
		WarmHostViewCached(host, file)
		return altScans.Load() - scans
	}
	if d := newProcess(); d != 1 {
		t.Fatalf("first process: %d scans, want 1", d)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatalf("the scan was not kept: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("kept with mode %v, want 0600", st.Mode().Perm())
	}
	if dst, err := os.Stat(filepath.Dir(file)); err != nil || dst.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v, %v; want mode 0700", dst, err)
	}
	for i := range 3 {
		if d := newProcess(); d != 0 {
			t.Fatalf("process %d: %d scans of an unchanged host, want 0", i+2, d)
		}
		if got := planOf(t, host); got != want {
			t.Fatalf("process %d: plan %q, want %q", i+2, got, want)
		}
	}

	// A changed bin directory: the kept scan is stale, and replaced.
	if err := os.Symlink("/etc/alternatives/unused", filepath.Join(host, "usr/bin/unused")); err != nil {
		t.Fatal(err)
	}
	ageDirs(t, host)
	for i, wantScans := range []int64{1, 0} {
		if d := newProcess(); d != wantScans {
			t.Fatalf("process %d after a change: %d scans, want %d", i+1, d, wantScans)
		}
		if got := planOf(t, host); !strings.Contains(got, "unused=/usr/bin/unused") {
			t.Fatalf("process %d after a change: %q", i+1, got)
		}
	}
}

// A scan of directories changed within the racy window is not kept: a
// second change in the same timestamp tick would go unseen.
func TestScanNotKeptWhenRacy(t *testing.T) {
	host := fakeDebian(t) // its directories were just made
	file := filepath.Join(t.TempDir(), "alts")
	WarmHostViewCached(host, file)
	if _, err := os.Lstat(file); !os.IsNotExist(err) {
		t.Fatalf("a racy scan was kept (%v)", err)
	}
}

// Whatever is found at the file's place, a process ignores it unless it
// is a complete scan file of this root that its own user wrote, plans
// what a scan sees, and puts a good file in its place.
func TestScanFileDistrusted(t *testing.T) {
	host := fakeDebian(t)
	ageDirs(t, host)
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	WarmHostViewCached(host, good)
	valid, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	forget(host)
	want := planOf(t, host)

	// relink re-encodes the valid file with its links replaced.
	relink := func(links ...string) []byte {
		j := bytes.Index(valid, []byte("\x00awk\x00/usr/bin/mawk")) // the first link
		if j < 0 {
			t.Fatalf("unexpected file layout: %q", valid)
		}
		j = bytes.LastIndexByte(valid[:j], 0) // the end of the stamps, before the count
		out := append([]byte{}, valid[:j+1]...)
		out = append(out, []byte(strings.Join(append([]string{strconv.Itoa(len(links) / 2)}, links...), "\x00")+"\x00end\x00")...)
		return out
	}
	// Only the plain links a scan makes, in order, are taken.
	if _, err := decodeScan(relink("awk", "/usr/bin/mawk"), host); err != nil {
		t.Fatalf("relink makes a bad file: %v", err)
	}

	cases := []struct {
		name  string
		make  func(t *testing.T, file string)
		owner bool // needs root
	}{
		{name: "truncated", make: writeFile(valid[:len(valid)-4], 0o600)},
		{name: "trailing bytes", make: writeFile(append(append([]byte{}, valid...), "x\x00"...), 0o600)},
		{name: "empty", make: writeFile(nil, 0o600)},
		{name: "another version", make: writeFile(bytes.Replace(valid, []byte("-v1"), []byte("-v9"), 1), 0o600)},
		{name: "another root", make: writeFile(bytes.Replace(valid, []byte(host), []byte(host+"x"), 1), 0o600)},
		{name: "writable by others", make: writeFile(valid, 0o666)},
		{name: "writable by group", make: writeFile(valid, 0o620)},
		{name: "target outside the view", make: writeFile(relink("awk", "/etc/shadow"), 0o600)},
		{name: "target not clean", make: writeFile(relink("awk", "/usr/bin/../../etc/shadow"), 0o600)},
		{name: "name with a slash", make: writeFile(relink("../awk", "/usr/bin/mawk"), 0o600)},
		{name: "names out of order", make: writeFile(relink("nawk", "/usr/bin/mawk", "awk", "/usr/bin/mawk"), 0o600)},
		{name: "names repeated", make: writeFile(relink("awk", "/usr/bin/mawk", "awk", "/usr/bin/gawk"), 0o600)},
		{name: "too many links", make: writeFile(relink(manyLinks(MaxAlternatives+1)...), 0o600)},
		{name: "too large", make: writeFile(append(append([]byte{}, valid...), make([]byte, maxScanFileBytes)...), 0o600)},
		{name: "symlink", make: func(t *testing.T, file string) {
			if err := os.Symlink(good, file); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "fifo", make: func(t *testing.T, file string) {
			if err := syscall.Mkfifo(file, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "directory", make: func(t *testing.T, file string) {
			if err := os.Mkdir(file, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another user's", owner: true, make: func(t *testing.T, file string) {
			writeFile(valid, 0o600)(t, file)
			if err := os.Chown(file, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.owner && os.Geteuid() != 0 {
				t.Skip("making a file of another user needs root")
			}
			file := filepath.Join(t.TempDir(), "alts")
			c.make(t, file)
			forget(host)
			scans := altScans.Load()
			done := make(chan struct{})
			go func() { defer close(done); WarmHostViewCached(host, file) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("blocked on the file")
			}
			if d := altScans.Load() - scans; d != 1 {
				t.Fatalf("%d scans, want 1: the file was taken", d)
			}
			if got := planOf(t, host); got != want {
				t.Fatalf("plan %q, want %q", got, want)
			}
			if c.name == "directory" {
				return // a directory cannot be renamed over; nothing else happens
			}
			if b, err := readOwnFile(file, maxScanFileBytes); err != nil || !bytes.Equal(b, valid) {
				t.Fatalf("not replaced by a good file: %v", err)
			}
		})
	}
}

func writeFile(b []byte, mode os.FileMode) func(t *testing.T, file string) {
	return func(t *testing.T, file string) {
		t.Helper()
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

func manyLinks(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("p%05d", i), "/usr/bin/mawk")
	}
	return out
}
