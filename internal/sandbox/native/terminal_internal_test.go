package native

import (
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"golang.org/x/sys/unix"
)

// hostPTY opens a terminal pair on the host's devpts, the master on the
// poller as the one pid 1 hands over is.
func hostPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("no /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	master, slave = os.NewFile(uintptr(m), "ptmx"), os.NewFile(uintptr(s), "pts")
	t.Cleanup(func() { master.Close(); slave.Close() })
	// Raw: each byte typed is readable at once, and nothing is echoed.
	tio, err := unix.IoctlGetTermios(s, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG
	tio.Iflag &^= unix.ICRNL
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(s, unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

// The moment a byte typed after a resize reaches the program, the
// terminal already has the new size: the order the caller made them in,
// with no window for a program that asks at once.
func TestTerminalInputKeepsResizesInOrder(t *testing.T) {
	master, slave := hostPTY(t)
	inR, inW := io.Pipe()
	resize := make(chan sandbox.WindowSize, 1)
	stop := make(chan struct{})
	defer close(stop)
	go terminalInput(master, inR, resize, stop)

	buf := make([]byte, 1)
	for i := 0; i < 500; i++ {
		rows := uint16(10 + i%200)
		resize <- sandbox.WindowSize{Rows: rows, Cols: 77}
		if _, err := inW.Write([]byte{'a'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(slave, buf); err != nil {
			t.Fatal(err)
		}
		ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			t.Fatal(err)
		}
		if ws.Row != rows || ws.Col != 77 {
			t.Fatalf("round %d: input arrived with the terminal at %dx%d, before its resize to %dx77", i, ws.Row, ws.Col, rows)
		}
	}
}
