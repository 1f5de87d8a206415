package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// API versions (see the package documentation).
const (
	MinVersion = "1.41"
	MaxVersion = "1.56"
)

// Bounds on what is read from the daemon.
const (
	// MaxErrorBody bounds an error reply's body, and a system-error
	// frame's message.
	MaxErrorBody = 64 << 10
	// MaxReply bounds a JSON reply (inspect, info, list, stats) and the
	// image import's message stream.
	MaxReply = 8 << 20
	// maxWaitReply bounds a container wait's reply: {"StatusCode":N,...}.
	maxWaitReply = 64 << 10
)

// DefaultHost is the daemon's socket when DOCKER_HOST names none.
const DefaultHost = "unix:///var/run/docker.sock"

// Error classes, for errors.Is on an *Error.
var (
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrInvalidArgument = errors.New("invalid argument")
	ErrInternal        = errors.New("internal daemon error")
	// ErrReplyTooLarge: the daemon sent more than this package reads.
	ErrReplyTooLarge = errors.New("reply from the Docker daemon too large")
	// ErrUnsupportedVersion: the daemon's API is older than MinVersion.
	ErrUnsupportedVersion = errors.New("unsupported Docker Engine API version")
)

// Error is a daemon reply with a status of 400 or more.
type Error struct {
	Status  int    // the HTTP status
	Message string // the daemon's message, bounded and trimmed
}

func (e *Error) Error() string { return "Error response from daemon: " + e.Message }

// Is classifies the error by its status (see the package documentation).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrInvalidArgument:
		return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusNotFound && e.Status != http.StatusConflict
	case ErrInternal:
		return e.Status >= 500
	}
	return false
}

// Client talks to one dockerd over its unix socket. It is safe for
// concurrent use once Ping has returned.
type Client struct {
	host string // as given, for messages
	sock string // the socket's path
	tr   *http.Transport
	hc   *http.Client

	mu      sync.Mutex
	version string // negotiated by Ping; MinVersion until then
}

// New returns a client of the daemon at host, a "unix://<path>" address;
// "" means DefaultHost. It does not connect: Ping does.
func New(host string) (*Client, error) {
	if host == "" {
		host = DefaultHost
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("docker host %q: %w", host, err)
	}
	if u.Scheme != "unix" || u.Path == "" {
		return nil, fmt.Errorf("docker host %q: only unix:///<path> addresses are supported", host)
	}
	c := &Client{host: host, sock: u.Path, version: MinVersion}
	c.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.dial(ctx)
		},
		// Execs come in bursts; keep a few connections for the next.
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	c.hc = &http.Client{Transport: c.tr}
	return c, nil
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.sock)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the Docker daemon at %s: %w", c.host, err)
	}
	return conn, nil
}

// Close drops the idle connections; streams still open (logs, hijacked
// execs, waits) are their owners' to close.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// Version is the API version requests use.
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// Ping checks that the daemon answers and negotiates the API version.
func (c *Client) Ping(ctx context.Context) error {
	resp, err := c.roundTrip(ctx, http.MethodGet, "/_ping", nil, nil, nil, false)
	if err != nil {
		return err
	}
	drainClose(resp.Body)
	v, err := negotiate(resp.Header.Get("Api-Version"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.version = v
	c.mu.Unlock()
	return nil
}

// negotiate is the version to use with a daemon announcing server: the
// lower of server and MaxVersion, refused below MinVersion. A daemon that
// announces nothing (only very old ones) is refused.
func negotiate(server string) (string, error) {
	sv, ok := parseVersion(server)
	if !ok {
		return "", fmt.Errorf("%w: the daemon announces API version %q", ErrUnsupportedVersion, server)
	}
	minV, _ := parseVersion(MinVersion)
	maxV, _ := parseVersion(MaxVersion)
	if less(sv, minV) {
		return "", fmt.Errorf("%w: the daemon serves API version %s, IronClaw needs at least %s (Docker 20.10)", ErrUnsupportedVersion, server, MinVersion)
	}
	if less(maxV, sv) {
		return MaxVersion, nil
	}
	return fmt.Sprintf("%d.%d", sv[0], sv[1]), nil
}

func parseVersion(s string) ([2]int, bool) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ".")
	if !ok {
		return [2]int{}, false
	}
	ma, err1 := strconv.Atoi(a)
	mi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || ma < 0 || mi < 0 {
		return [2]int{}, false
	}
	return [2]int{ma, mi}, true
}

func less(a, b [2]int) bool { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]) }

// apiURL is the request URL of path (e.g. "/containers/json") at the
// negotiated version; unversioned paths (/_ping) are sent as they are.
func (c *Client) apiURL(path string, query url.Values, versioned bool) string {
	if versioned {
		path = "/v" + c.Version() + path
	}
	// The host is a placeholder: the connection is the socket's.
	u := url.URL{Scheme: "http", Host: "docker", Path: path, RawQuery: query.Encode()}
	return u.String()
}

// roundTrip sends one request and returns the reply when its status is
// below 400; otherwise the reply's body becomes an *Error. body, when not
// nil, is sent as JSON unless it is an io.Reader.
func (c *Client) roundTrip(ctx context.Context, method, path string, query url.Values, header http.Header, body any, versioned bool) (*http.Response, error) {
	req, err := c.newRequest(ctx, method, path, query, header, body, versioned)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, header http.Header, body any, versioned bool) (*http.Request, error) {
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd, ctype = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.apiURL(path, query, versioned), rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("User-Agent", "ironclaw")
	return req, nil
}

// readError turns an error reply into an *Error: the JSON {"message": ...}
// dockerd sends, or the body as text, cut at MaxErrorBody.
func readError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody+1))
	truncated := len(data) > MaxErrorBody
	if truncated {
		data = data[:MaxErrorBody]
	}
	var m struct {
		Message string `json:"message"`
	}
	switch {
	case !truncated && json.Unmarshal(data, &m) == nil && m.Message != "":
		e.Message = strings.TrimSpace(m.Message)
	case len(bytes.TrimSpace(data)) > 0:
		e.Message = strings.TrimSpace(string(data))
		if truncated {
			e.Message += " [... cut at " + strconv.Itoa(MaxErrorBody) + " bytes]"
		}
	default:
		e.Message = fmt.Sprintf("%d %s with no message", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if err != nil && !truncated {
		e.Message += fmt.Sprintf(" (reading the reply: %v)", err)
	}
	return e
}

// call sends a request and decodes its JSON reply into v (nil: the
// reply is discarded), reading at most limit bytes.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, body, v any, limit int64) error {
	resp, err := c.roundTrip(ctx, method, path, query, nil, body, true)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeBounded(resp.Body, v, limit)
}

// decodeBounded decodes one JSON value of at most limit bytes from r into
// v; with v nil, it reads and discards up to limit bytes.
func decodeBounded(r io.Reader, v any, limit int64) error {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("reading the daemon's reply: %w", err)
	}
	if int64(len(data)) > limit {
		return fmt.Errorf("%w: more than %d bytes", ErrReplyTooLarge, limit)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding the daemon's reply: %w", err)
	}
	return nil
}

// drainClose reads a little of what is left, so that the connection can
// be reused, and closes the body.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 4<<10)
	_ = body.Close()
}

// hijack sends a POST asking to upgrade the connection to a raw stream and
// returns the connection once the daemon switched protocols. ctx bounds
// the setup only: the stream outlives it.
func (c *Client) hijack(ctx context.Context, path string, body any) (retConn net.Conn, retBuf *bufio.Reader, retErr error) {
	req, err := c.newRequest(ctx, http.MethodPost, path, nil, nil, body, true)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if retErr != nil {
			conn.Close()
		}
	}()
	// A cancelled setup closes the connection, which ends the write or
	// read below.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer func() {
		if !stop() {
			// The connection was closed under the setup: whatever failed,
			// the cause is ctx.
			retConn, retBuf, retErr = nil, nil, ctx.Err()
		}
	}()
	if err := req.Write(conn); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the daemon's reply: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			return nil, nil, readError(resp)
		}
		return nil, nil, fmt.Errorf("the daemon did not switch to a raw stream: %s", resp.Status)
	}
	return conn, br, nil
}
