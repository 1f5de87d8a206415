package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/spf13/cobra"
)

func newSandboxPortURLCmd(e *env) *cobra.Command {
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "port-url ID PORT",
		Short: "Print a signed, expiring URL that serves the sandbox's port (policy ports.inbound)",
		Long: `Print a URL on the daemon's ports listener that reverse-proxies HTTP and
WebSocket to a server the sandbox serves on PORT (one of its create's
--port). Whoever holds the URL needs no token, until it expires or the
sandbox ends.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			port, err := flagtypes.ParsePort(args[1])
			if err != nil {
				return err
			}
			u, err := newClient().OpenPort(c.Context(), args[0], port, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, u.URL)
			return nil
		},
	}
	flagtypes.Duration(c.Flags(), &ttl, "ttl", "", 0, "how long the URL works (default and most: the policy's ports.url_ttl)")
	return c
}

func newSandboxPortForwardCmd(e *env) *cobra.Command {
	var local string
	c := &cobra.Command{
		Use:   "port-forward ID PORT",
		Short: "Forward a local TCP port to the sandbox's PORT through the daemon (policy ports.inbound)",
		Long: `Listen on --local (default 127.0.0.1:PORT) and carry each connection to the
sandbox's 127.0.0.1:PORT through the daemon, until interrupted. PORT must be
one of the sandbox's create's --port.`,
		Example: `  ironclaw sandbox port-forward sbx-0123 3000 &
  curl http://127.0.0.1:3000/`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			id := args[0]
			port, err := flagtypes.ParsePort(args[1])
			if err != nil {
				return err
			}
			if local == "" {
				local = net.JoinHostPort("127.0.0.1", args[1])
			}
			ln, err := net.Listen("tcp", local)
			if err != nil {
				return err
			}
			cl := newClient()
			// One tunnel first, so that a wrong id, port or policy fails
			// here and now rather than on the first connection.
			probe, err := cl.ConnectPort(c.Context(), id, port)
			if err != nil {
				ln.Close()
				return err
			}
			probe.Close()
			fmt.Fprintf(e.stdout, "forwarding %s -> %s:%d\n", ln.Addr(), id, port)
			return forward(c.Context(), ln, func(ctx context.Context) (io.ReadWriteCloser, error) {
				return cl.ConnectPort(ctx, id, port)
			}, func(err error) { fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(err.Error())) })
		},
	}
	c.Flags().StringVar(&local, "local", "", "local address to listen on (default 127.0.0.1:PORT)")
	return c
}

// forward accepts on ln until ctx ends, carrying each connection through
// a tunnel of its own.
func forward(ctx context.Context, ln net.Listener, tunnel func(context.Context) (io.ReadWriteCloser, error), report func(error)) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			t, err := tunnel(ctx)
			if err != nil {
				report(err)
				return
			}
			defer t.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(t, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, t); done <- struct{}{} }()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}()
	}
}

// portsFlag is a repeatable --port N.
type portsFlag struct{ ports *[]uint16 }

func (p portsFlag) String() string {
	if p.ports == nil {
		return ""
	}
	return fmt.Sprint(*p.ports)
}

func (p portsFlag) Set(s string) error {
	n, err := flagtypes.ParsePort(s)
	if err != nil {
		return err
	}
	*p.ports = append(*p.ports, uint16(n))
	return nil
}

func (portsFlag) Type() string { return "port" }
