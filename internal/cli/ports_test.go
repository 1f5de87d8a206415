package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
)

// forward carries every local connection through a tunnel of its own,
// reports a tunnel that cannot be opened without stopping, and ends with
// its context.
func TestForwardCarriesEachConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tunnels := 0
	reported := make(chan error, 4)
	done := make(chan error, 1)
	go func() {
		done <- forward(ctx, ln, func(context.Context) (io.ReadWriteCloser, error) {
			tunnels++
			if tunnels == 2 {
				return nil, errors.New("no tunnel")
			}
			near, far := net.Pipe()
			go func() { // the sandbox's server: answers one line
				line, _ := bufio.NewReader(far).ReadString('\n')
				fmt.Fprintf(far, "echo:%s", line)
				far.Close()
			}()
			return near, nil
		}, func(err error) { reported <- err })
	}()
	ask := func() string {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "hi\n")
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := ask(); got != "echo:hi\n" {
		t.Fatalf("first connection: %q", got)
	}
	if got := ask(); got != "" {
		t.Fatalf("a connection without a tunnel got %q", got)
	}
	if err := <-reported; !strings.Contains(err.Error(), "no tunnel") {
		t.Fatalf("reported %v", err)
	}
	if got := ask(); got != "echo:hi\n" {
		t.Fatalf("third connection: %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("forward after cancel: %v", err)
	}
}
