// Package netns opens TCP connections from the host into a sandbox's own
// network namespace: the daemon's way in to a server that listens on the
// sandbox's loopback (inbound ports). The sandbox gets no interface and no
// route for it; the connection is made by the daemon, which enters the
// namespace on one OS thread just long enough to create the socket.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// ErrHostNamespace: the process named shares the daemon's own network
// namespace, so its loopback is the host's. Never dialled.
var ErrHostNamespace = errors.New("netns: the process is in the daemon's own network namespace")

// DialLoopback connects to 127.0.0.1:port in the network namespace of the
// host process pid (a sandbox's pid 1). It refuses a namespace that is the
// daemon's own (a recycled pid, a backend without a namespace of its own):
// the host's loopback is never reached this way. alive reports whether
// pid is still the sandbox's (nil: it is); it is asked once the namespace
// is open, which holds it: had the sandbox ended and its pid gone to
// another process before, alive says so and nothing is dialled.
func DialLoopback(ctx context.Context, pid int, port uint16, alive func() error) (net.Conn, error) {
	if pid <= 1 || port == 0 {
		return nil, fmt.Errorf("%w: no sandbox process or port to dial", sandbox.ErrInvalidRequest)
	}
	target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("netns: the sandbox's network namespace: %w", err)
	}
	defer target.Close()
	if alive != nil {
		if err := alive(); err != nil {
			return nil, err
		}
	}
	fd, err := socketIn(target)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "sandbox-loopback")
	defer f.Close() // FileConn holds its own descriptor
	// A connect on loopback is answered at once (accepted or refused);
	// the send timeout bounds it should the listener's backlog be full.
	deadline := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		deadline = max(time.Millisecond, min(deadline, time.Until(d)))
	}
	tv := unix.NsecToTimeval(deadline.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return nil, fmt.Errorf("dial 127.0.0.1:%d in the sandbox: %w", port, err)
	}
	return net.FileConn(f)
}

// socketIn makes a TCP socket in target's network namespace. The socket
// is made on an OS thread locked for the purpose, which enters the
// namespace and comes back at once; a thread that could not come back is
// never unlocked, so it ends with its goroutine and nothing else runs in
// the sandbox's namespace. The namespace the thread started in is the
// daemon's: a target equal to it is refused.
func socketIn(target *os.File) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("netns: the daemon's network namespace: %w", err)}
			return
		}
		defer home.Close()
		if same, err := sameNamespace(home, target); err != nil || same {
			runtime.UnlockOSThread()
			if err == nil {
				err = ErrHostNamespace
			}
			done <- result{-1, err}
			return
		}
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("netns: enter the sandbox's network namespace: %w", err)}
			return
		}
		fd, serr := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stay locked: this thread dies with the goroutine.
			if serr == nil {
				unix.Close(fd)
			}
			done <- result{-1, fmt.Errorf("netns: come back from the sandbox's network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		if serr != nil {
			done <- result{-1, fmt.Errorf("netns: socket: %w", serr)}
			return
		}
		done <- result{fd, nil}
	}()
	r := <-done
	return r.fd, r.err
}

func sameNamespace(a, b *os.File) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Fstat(int(a.Fd()), &sa); err != nil {
		return false, err
	}
	if err := unix.Fstat(int(b.Fd()), &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}
