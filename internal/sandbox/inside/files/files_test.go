package files

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

func framed(t *testing.T, payload []byte) []byte {
	t.Helper()
	b, err := io.ReadAll(wire.NewFramer(bytes.NewReader(payload)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func listTemps(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if strings.HasPrefix(de.Name(), wire.UploadTempPrefix) {
			out = append(out, de.Name())
		}
	}
	return out
}

// An upload cut short must leave the old file, and nothing else, behind.
func TestHostileUploadAbortedKeepsOldFile(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "d", "f.txt")
	if _, err := Write(base, "d/f.txt", wire.NewUnframer(bytes.NewReader(framed(t, []byte("old content")))), 0o600); err != nil {
		t.Fatal(err)
	}
	whole := framed(t, bytes.Repeat([]byte("new"), 100000))
	for _, cut := range []int{0, 2, 4, 70000, len(whole) - 4} {
		_, err := Write(base, "d/f.txt", wire.NewUnframer(bytes.NewReader(whole[:cut])), 0o644)
		if !errors.Is(err, wire.ErrIncomplete) {
			t.Fatalf("cut at %d: Write = %v, want wire.ErrIncomplete", cut, err)
		}
		if b, _ := os.ReadFile(target); string(b) != "old content" {
			t.Fatalf("cut at %d: the file now holds %d bytes", cut, len(b))
		}
		if tmps := listTemps(t, filepath.Dir(target)); len(tmps) != 0 {
			t.Fatalf("cut at %d: temporary files left: %v", cut, tmps)
		}
	}
	n, err := Write(base, "d/f.txt", wire.NewUnframer(bytes.NewReader(whole)), 0o640)
	if err != nil || n != 300000 {
		t.Fatalf("complete upload: %d, %v", n, err)
	}
	st, err := os.Stat(target)
	if err != nil || st.Size() != 300000 || st.Mode().Perm()&^0o022 != 0o640&^0o022 {
		t.Fatalf("after the complete upload: %v %v", st, err)
	}
}

// A FIFO (or socket) at the path is refused at once, for writing and for
// reading, and is left in place.
func TestHostileUploadOntoFIFODoesNotBlock(t *testing.T) {
	base := t.TempDir()
	fifo := filepath.Join(base, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(base, "sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, tc := range []struct {
			name string
			want error
		}{{"fifo", ErrNotRegular}, {"sock", ErrNotRegular}, {"dir", unix.EISDIR}, {"link", unix.ELOOP}} {
			if _, err := Write(base, tc.name, wire.NewUnframer(bytes.NewReader(framed(t, []byte("x")))), 0); !errors.Is(err, tc.want) {
				t.Errorf("Write(%s) = %v, want %v", tc.name, err, tc.want)
			}
			if f, _, err := OpenRegular(base, tc.name); !errors.Is(err, tc.want) {
				if f != nil {
					f.Close()
				}
				t.Errorf("OpenRegular(%s) = %v, want %v", tc.name, err, tc.want)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // only a hang gets here
		t.Fatal("a file operation on a FIFO blocked")
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO is gone or replaced: %v %v", st, err)
	}
	if tmps := listTemps(t, base); len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
}
