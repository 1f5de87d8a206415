package native_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/netns"
)

// The daemon reaches a server on the sandbox's loopback through the
// sandbox's own network namespace, and reaches nothing else that way: not
// a port nobody serves inside, not the host's own loopback.
func TestDialLoopbackReachesOnlyTheSandbox(t *testing.T) {
	b := probeBox(t, sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{8080}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan int, 1)
	go b.SB.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/probe", "tcp4", "127.0.0.1:8080"}, Env: []string{"IRONCLAW_PROBE=serve"},
		Background: true, Started: func(pid int) { ready <- pid }})
	<-ready
	sb := b.SB.(*native.Sandbox)
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err = sb.DialLoopback(ctx, 8080); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("dial the sandbox's server: %v", err)
	}
	fmt.Fprintf(c, "hello\n")
	got, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if got != "inside:hello\n" {
		t.Fatalf("answer %q", got)
	}
	// A host server on the same port number is not what the dial reaches.
	if l, err := net.Listen("tcp4", "127.0.0.1:0"); err == nil {
		defer l.Close()
		port := uint16(l.Addr().(*net.TCPAddr).Port)
		if c, err := sb.DialLoopback(ctx, port); err == nil {
			c.Close()
			t.Fatalf("the dial into the sandbox reached the host's port %d", port)
		}
	}
	// The daemon's own namespace is never dialled into.
	if _, err := netns.DialLoopback(ctx, os.Getpid(), 8080, nil); !errors.Is(err, netns.ErrHostNamespace) {
		t.Fatalf("dial into our own namespace: %v", err)
	}
	// A sandbox that ended is not dialled into, whatever holds its pid.
	if _, err := netns.DialLoopback(ctx, sb.InitPid(), 8080, func() error { return sandbox.ErrClosed }); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("dial with a sandbox that ended: %v", err)
	}
	cancel()
}
