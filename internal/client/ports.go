package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// PortURL is a signed URL for a sandbox's port.
type PortURL = wire.PortURL

// OpenPort asks for a URL that reverse-proxies to the sandbox's server on
// port (one its create listed); ttl 0 is the policy's longest.
func (c *Client) OpenPort(ctx context.Context, id string, port int, ttl time.Duration) (PortURL, error) {
	var out PortURL
	err := c.doJSON(ctx, agent, http.MethodPost, sandboxPath(id, "/ports"), nil, wire.OpenPortRequest{Port: port, TTL: wire.Duration(ttl)}, &out)
	return out, err
}

// ConnectPort opens a raw TCP tunnel to the sandbox's port through the
// daemon (an HTTP/1.1 upgrade). Close the result to end it.
func (c *Client) ConnectPort(ctx context.Context, id string, port int) (io.ReadWriteCloser, error) {
	req, err := c.newRequest(ctx, agent, http.MethodGet, sandboxPath(id, "/ports/", strconv.Itoa(port), "/connect"), nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, errors.New("the daemon's answer to a tunnel is not a connection")
	}
	return rwc, nil
}
