package container

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// RandHex returns n random bytes in hex (sandbox ids, exec nonces).
func RandHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// StageHelper copies exe into dir as prefix<hash of its content>, once,
// and returns that path: the bind source must be a stable file the
// container's (unprivileged) root can reach and run, and exe may live in a
// private directory (a go test binary does).
func StageHelper(exe, dir, prefix string) (string, error) {
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, prefix+hex.EncodeToString(h.Sum(nil)[:8]))
	if st, err := os.Stat(dst); err == nil && st.Mode().IsRegular() {
		return dst, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".helper-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, f); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp.Name(), dst)
}

// ListenUnix listens on a socket the sandbox user (a different host uid)
// may connect to.
func ListenUnix(p string) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o666); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// AgentReady reads the agent's first line on its control connection,
// waiting at most timeout: wire.MsgReady, or why its setup failed. On
// error ctl is closed; tail adds the last diagnostics (": ..." or ""). The
// returned reader holds whatever follows (the agent never speaks again, so
// its end of file means pid 1 is gone).
func AgentReady(ctl net.Conn, id string, timeout time.Duration, tail func() string) (*bufio.Reader, error) {
	_ = ctl.SetReadDeadline(time.Now().Add(timeout))
	rd := bufio.NewReader(ctl)
	line, err := rd.ReadString('\n')
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("sandbox %s: the agent hung up during setup%s", id, tail())
	}
	if line = strings.TrimSpace(line); line != wire.MsgReady {
		ctl.Close()
		return nil, fmt.Errorf("%w: sandbox setup failed: %s", sandbox.ErrUnsupported, strings.TrimPrefix(line, wire.MsgFailed+" "))
	}
	_ = ctl.SetReadDeadline(time.Time{})
	return rd, nil
}

// Accepted is what AcceptOne's Accept returned.
type Accepted struct {
	Conn net.Conn
	Err  error
}

// AcceptOne accepts one connection on l (the agent's, on its control
// socket) in the background; the channel delivers the outcome.
func AcceptOne(l net.Listener) <-chan Accepted {
	acc := make(chan Accepted, 1)
	go func() {
		c, err := l.Accept()
		acc <- Accepted{c, err}
	}()
	return acc
}
