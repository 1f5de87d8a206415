// Package client talks to an ironclaw daemon over its HTTP API (see
// docs/http-api.md and api/openapi.yaml). The zero Client is usable: it
// finds the daemon and its tokens from the environment and the default
// data directory.
//
// What it sends and decodes are the API's wire types (package wire), the
// same the daemon writes; the answers are those types themselves (Sandbox,
// Approval, ExecResult, ... are aliases), the requests are shaped for Go
// callers (CreateRequest, ExecRequest) and turned into wire types here.
package client

import (
	"github.com/ironclaw/ironclaw/internal/defaults"

	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Environment variables the zero Client reads.
const (
	EnvAddr          = "IRONCLAW_ADDR"           // daemon address: http://host:port or host:port
	EnvAgentToken    = "IRONCLAW_API_TOKEN"      // agent token
	EnvOperatorToken = "IRONCLAW_OPERATOR_TOKEN" // operator token
	EnvDataDir       = "IRONCLAW_DATA_DIR"       // where the daemon keeps its token files
)

// DefaultAddr is where the daemon listens unless told otherwise.
const DefaultAddr = defaults.Addr

// Token file names inside the data directory.
const (
	AgentTokenFile    = "agent.token"
	OperatorTokenFile = "operator.token"
	// AgentsDir holds named agents' tokens, NAME.token.
	AgentsDir = "agents"
)

// DefaultDataDir is $IRONCLAW_DATA_DIR, else $XDG_DATA_HOME/ironclaw, else
// ~/.local/share/ironclaw. It must agree with the daemon's default.
func DefaultDataDir() string {
	if d := os.Getenv(EnvDataDir); d != "" {
		return d
	}
	return BaseDataDir()
}

// BaseDataDir is $XDG_DATA_HOME/ironclaw, else ~/.local/share/ironclaw
// (ignoring IRONCLAW_DATA_DIR).
func BaseDataDir() string { return defaults.DataDir() }

// Client calls the daemon. Fields left empty are filled from the
// environment at each call.
type Client struct {
	// Addr is the daemon's base URL ("http://127.0.0.1:8787") or host:port.
	// Empty: $IRONCLAW_ADDR, else DefaultAddr.
	Addr string
	// Token is sent with every request. Empty: for agent routes
	// $IRONCLAW_API_TOKEN, else DataDir/agent.token, else the operator
	// token; for operator routes (audit) $IRONCLAW_OPERATOR_TOKEN, else
	// DataDir/operator.token.
	Token string
	// DataDir holds the token files; empty means DefaultDataDir().
	DataDir string
	// HTTPClient does the requests; nil means a client without an overall
	// timeout (exec and follow stream).
	HTTPClient *http.Client
}

// Error is an error answer of the daemon.
type Error struct {
	Status  int    // HTTP status
	Code    string // e.g. "not_found", "invalid_argument"
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message + " (" + e.Code + ")"
}

// IsCode reports whether err is an *Error with that code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

type role int

const (
	agent role = iota
	operator
)

func (c *Client) baseURL() string {
	a := c.Addr
	if a == "" {
		a = os.Getenv(EnvAddr)
	}
	if a == "" {
		a = DefaultAddr
	}
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	return strings.TrimRight(a, "/")
}

func readToken(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (c *Client) token(r role) string {
	if c.Token != "" {
		return c.Token
	}
	dir := c.DataDir
	if dir == "" {
		dir = DefaultDataDir()
	}
	if r == operator {
		if t := os.Getenv(EnvOperatorToken); t != "" {
			return t
		}
		return readToken(filepath.Join(dir, OperatorTokenFile))
	}
	if t := os.Getenv(EnvAgentToken); t != "" {
		return t
	}
	if t := readToken(filepath.Join(dir, AgentTokenFile)); t != "" {
		return t
	}
	if t := os.Getenv(EnvOperatorToken); t != "" {
		return t
	}
	return readToken(filepath.Join(dir, OperatorTokenFile))
}

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return http.DefaultClient
}

// do sends a request and returns the response when its status is 2xx;
// otherwise it returns an *Error. body may be nil, an io.Reader (sent raw)
// or anything else (sent as JSON).
func (c *Client) do(ctx context.Context, r role, method, path string, q url.Values, body any) (*http.Response, error) {
	req, err := c.newRequest(ctx, r, method, path, q, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

// newRequest builds a request to the daemon with r's token (see do for
// body).
func (c *Client) newRequest(ctx context.Context, r role, method, path string, q url.Values, body any) (*http.Request, error) {
	u := c.baseURL() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd, ctype = b, "application/octet-stream"
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd, ctype = bytes.NewReader(buf), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if t := c.token(r); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	return req, nil
}

// send sends req, whatever the response's status; an error means the
// daemon was not reached (or ctx ended).
func (c *Client) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach the ironclaw daemon at %s (is 'ironclaw serve' running?): %w", c.baseURL(), unwrapURL(err))
	}
	return resp, nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var env wire.ErrorResponse
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message = env.Error.Code, env.Error.Message
		return e
	}
	e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	e.Message = strings.TrimSpace(string(b))
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if len(e.Message) > 200 {
		e.Message = e.Message[:200] + "..."
	}
	return e
}

func (c *Client) doJSON(ctx context.Context, r role, method, path string, q url.Values, body, out any) error {
	resp, err := c.do(ctx, r, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the daemon's answer to %s %s: %w", method, path, err)
	}
	return nil
}

// Health returns nil when the daemon answers /healthz.
func (c *Client) Health(ctx context.Context) error {
	var h wire.Health
	if err := c.doJSON(ctx, agent, http.MethodGet, "/healthz", nil, nil, &h); err != nil {
		return err
	}
	if !h.OK {
		return errors.New("the daemon answered /healthz without ok")
	}
	return nil
}

// ---- sandboxes ----

// Limits of a sandbox; zero fields take the daemon's defaults. Sizes are
// strings like "256M" (or a number of bytes), durations like "30s"; they
// are checked before anything is sent (an *Error with code
// invalid_argument).
type Limits struct {
	Memory    string  `json:"memory,omitempty"`
	Pids      int64   `json:"pids,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	Timeout   string  `json:"timeout,omitempty"`
	Output    string  `json:"output,omitempty"`
	Workspace string  `json:"workspace,omitempty"`
	Tmp       string  `json:"tmp,omitempty"`
	OpenFiles int64   `json:"open_files,omitempty"`
}

// wire turns l into the API's limits object (nil when l is all zero).
func (l Limits) wire() (*wire.Limits, error) {
	if l == (Limits{}) {
		return nil, nil
	}
	out := &wire.Limits{Pids: l.Pids, CPUs: l.CPUs, OpenFiles: l.OpenFiles}
	for _, f := range []struct {
		name, v string
		dst     *wire.Bytes
	}{{"memory", l.Memory, &out.Memory}, {"output", l.Output, &out.Output}, {"workspace", l.Workspace, &out.Workspace}, {"tmp", l.Tmp, &out.Tmp}} {
		if f.v == "" {
			continue
		}
		n, err := sandbox.ParseBytes(f.v)
		if err != nil {
			return nil, invalid("limits." + f.name + ": " + err.Error())
		}
		*f.dst = wire.Bytes(n)
	}
	if l.Timeout != "" {
		d, err := time.ParseDuration(l.Timeout)
		if err != nil || d < 0 {
			return nil, invalid(fmt.Sprintf("limits.timeout %q: want a duration such as 30s", l.Timeout))
		}
		out.Timeout = wire.Duration(d)
	}
	return out, nil
}

// invalid is a request the client refuses before sending it, in the
// daemon's words for one it would refuse.
func invalid(msg string) error {
	return &Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidArgument, Message: msg}
}

// CreateRequest asks for a sandbox.
type CreateRequest struct {
	Image  string            // a directory root on the daemon's host; "" the host-toolchain view
	Env    map[string]string // environment of every command
	Limits Limits
	TTL    time.Duration // 0: the daemon's default
	Idle   time.Duration // 0: the daemon's default
	// IdleAction is what the idle timeout does: "destroy" or "pause" (""
	// the policy's).
	IdleAction string
	Labels     map[string]string
	// EgressAllow adds hosts to the sandbox's egress allowlist.
	EgressAllow []string
	// Volumes are named volumes of the caller's to mount.
	Volumes []VolumeMount
	// Ports are loopback ports the sandbox's servers may listen on.
	Ports []uint16
	// Snapshot, if set, starts /workspace as that snapshot (a fork).
	Snapshot string
	// Secrets names brokered secrets the sandbox may use (it sees
	// placeholders; the egress broker puts in the values).
	Secrets []string
}

// Wire is r as the API's create body.
func (r CreateRequest) Wire() (wire.CreateSandboxRequest, error) {
	w := wire.CreateSandboxRequest{Image: r.Image, Env: r.Env, Labels: r.Labels,
		TTL: wire.Duration(r.TTL), Idle: wire.Duration(r.Idle), IdleAction: r.IdleAction, Snapshot: r.Snapshot}
	if len(r.EgressAllow) > 0 {
		w.Egress = &wire.EgressAllow{Allow: r.EgressAllow}
	}
	w.Volumes, w.Ports, w.Secrets = r.Volumes, r.Ports, r.Secrets
	l, err := r.Limits.wire()
	if err != nil {
		return w, err
	}
	w.Limits = l
	return w, nil
}

// MarshalJSON writes r as the API's create body.
func (r CreateRequest) MarshalJSON() ([]byte, error) {
	w, err := r.Wire()
	if err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// Sandbox describes a sandbox.
type Sandbox = wire.Sandbox

func sandboxPath(id string, rest ...string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + strings.Join(rest, "")
}

// CreateSandbox starts a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (Sandbox, error) {
	created, err := c.CreateSandboxFiled(ctx, req)
	return created.Sandbox, err
}

// CreateSandboxFiled starts a sandbox and returns it with the sandbox.widen
// request the daemon filed for what it asked beyond the operator's
// ceilings and allowlist, if any.
func (c *Client) CreateSandboxFiled(ctx context.Context, req CreateRequest) (wire.CreatedSandbox, error) {
	var out wire.CreatedSandbox
	body, err := req.Wire()
	if err != nil {
		return out, err
	}
	err = c.doJSON(ctx, agent, http.MethodPost, "/v1/sandboxes", nil, body, &out)
	return out, err
}

// ListSandboxes returns the running sandboxes carrying every label given.
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string) ([]Sandbox, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Add("label", k+"="+v)
	}
	var all []Sandbox
	for {
		var out wire.SandboxList
		if err := c.doJSON(ctx, agent, http.MethodGet, "/v1/sandboxes", q, nil, &out); err != nil {
			return all, err
		}
		all = append(all, out.Sandboxes...)
		if out.Next == "" {
			return all, nil
		}
		q.Set("after", out.Next)
	}
}

// GetSandbox describes a sandbox of any state.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, agent, http.MethodGet, sandboxPath(id), nil, nil, &sb)
	return sb, err
}

// ListSandboxesPage returns one page of the running and paused sandboxes
// carrying every label given: at most limit (0: the daemon's default),
// after the sandbox id after ("" from the start). Next on the answer, when
// set, is the after of the following page.
func (c *Client) ListSandboxesPage(ctx context.Context, labels map[string]string, after string, limit int) (wire.SandboxList, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Add("label", k+"="+v)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out wire.SandboxList
	err := c.doJSON(ctx, agent, http.MethodGet, "/v1/sandboxes", q, nil, &out)
	return out, err
}

// SetLifetime gives a sandbox a new TTL counted from now and/or a new idle
// timeout (0 leaves that one as it is), within the operator's ceiling.
func (c *Client) SetLifetime(ctx context.Context, id string, ttl, idle time.Duration) (Sandbox, error) {
	var sb Sandbox
	body := wire.LifetimeRequest{TTL: wire.Duration(ttl), Idle: wire.Duration(idle)}
	err := c.doJSON(ctx, agent, http.MethodPost, sandboxPath(id)+"/lifetime", nil, body, &sb)
	return sb, err
}

// SandboxStats reports a running or paused sandbox's resource use and
// limits.
func (c *Client) SandboxStats(ctx context.Context, id string) (wire.SandboxStats, error) {
	var st wire.SandboxStats
	err := c.doJSON(ctx, agent, http.MethodGet, sandboxPath(id)+"/stats", nil, nil, &st)
	return st, err
}

// PauseSandbox freezes a sandbox (no CPU; memory, files and processes
// kept); the next request to it resumes it. Pausing a paused one is no
// error.
func (c *Client) PauseSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, agent, http.MethodPost, sandboxPath(id)+"/pause", nil, nil, &sb)
	return sb, err
}

// ResumeSandbox thaws a paused sandbox; resuming a running one is no
// error.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, agent, http.MethodPost, sandboxPath(id)+"/resume", nil, nil, &sb)
	return sb, err
}

// SnapshotSandbox copies a sandbox's /workspace into a new snapshot.
func (c *Client) SnapshotSandbox(ctx context.Context, id string) (wire.Snapshot, error) {
	var s wire.Snapshot
	err := c.doJSON(ctx, agent, http.MethodPost, sandboxPath(id)+"/snapshots", nil, nil, &s)
	return s, err
}

// ListSnapshots lists the caller's snapshots (an operator's: all).
func (c *Client) ListSnapshots(ctx context.Context) ([]wire.Snapshot, error) {
	var out wire.SnapshotList
	err := c.doJSON(ctx, agent, http.MethodGet, "/v1/snapshots", nil, nil, &out)
	return out.Snapshots, err
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, agent, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil, nil)
}

// DeleteSandbox destroys a sandbox (deleting an ended one is no error).
func (c *Client) DeleteSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.doJSON(ctx, agent, http.MethodDelete, sandboxPath(id), nil, nil, &sb)
	return sb, err
}

// ---- exec ----

// ExecRequest runs one command: exactly one of Cmd (a shell line) and Argv.
type ExecRequest struct {
	Cmd     string
	Argv    []string
	Stdin   string
	Cwd     string
	Env     map[string]string
	Timeout time.Duration // 0: the sandbox's limit
	// Approval spends an approved exec.command request (see
	// ApprovalRequiredError).
	Approval string

	// Output is written here as it arrives (nil discards it).
	Stdout, Stderr io.Writer
}

// ExecResult is the final frame of an exec: Exit, DurationMS, Truncated,
// TimedOut, OOMKilled, and Error (why the command could not start, exit
// 126/127, or why its end is unknown, exit -1).
type ExecResult = wire.ExecExitFrame

// Wire is r as the API's exec body.
func (r ExecRequest) Wire() wire.ExecRequest {
	w := wire.ExecRequest{Argv: r.Argv, Cwd: r.Cwd, Timeout: wire.Duration(r.Timeout), Approval: r.Approval}
	if r.Cmd != "" {
		w.Cmd = &r.Cmd
	}
	if r.Stdin != "" {
		w.Stdin = &r.Stdin
	}
	if len(r.Env) > 0 {
		w.Env = r.Env
	}
	return w
}

// Exec runs a command and streams its output to req.Stdout and req.Stderr.
// It returns the final frame; an error means the command's outcome is
// unknown (the stream broke) or the request was refused.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	resp, err := c.do(ctx, agent, http.MethodPost, sandboxPath(id, "/exec"), nil, req.Wire())
	if err != nil {
		return ExecResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusAccepted {
		var out wire.ExecPending
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return ExecResult{}, fmt.Errorf("exec: decoding the approval request: %w", err)
		}
		return ExecResult{}, &ApprovalRequiredError{Approval: out.Approval}
	}
	var res ExecResult
	err = readFrames(ctx, resp.Body, 64<<20, "exec: the output stream broke", func(line []byte) (bool, error) {
		// An output frame, or the exit frame (the one with "exit").
		var f struct {
			wire.ExecOutputFrame
			Exit *int `json:"exit"`
		}
		if err := json.Unmarshal(line, &f); err != nil {
			return false, fmt.Errorf("exec: bad frame from the daemon: %w", err)
		}
		if f.Stdout != nil && req.Stdout != nil {
			if _, err := io.WriteString(req.Stdout, *f.Stdout); err != nil {
				return false, err
			}
		}
		if f.Stderr != nil && req.Stderr != nil {
			if _, err := io.WriteString(req.Stderr, *f.Stderr); err != nil {
				return false, err
			}
		}
		if f.Exit == nil {
			return false, nil
		}
		if err := json.Unmarshal(line, &res); err != nil {
			return false, fmt.Errorf("exec: bad exit frame from the daemon: %w", err)
		}
		return true, nil
	})
	if errors.Is(err, errNoEndFrame) {
		return ExecResult{}, errors.New("exec: the output stream ended without an exit status")
	}
	if err != nil {
		return ExecResult{}, err
	}
	return res, nil
}

// errNoEndFrame: a stream of frames ended before its last frame.
var errNoEndFrame = errors.New("no end frame")

// readFrames reads a stream of JSON lines (of at most max bytes; blank
// lines skipped), calling f with each until it reports the last one. A
// stream cut short is ctx's error if ctx has ended, else broke and the
// read's error, or errNoEndFrame if the stream simply ended.
func readFrames(ctx context.Context, body io.Reader, max int, broke string, f func(line []byte) (last bool, err error)) error {
	sc := bufio.NewScanner(body)
	// Small to start (most frames are short, and a fresh 64 KiB buffer per
	// exec was most of what an exec allocated here); it grows up to max.
	sc.Buffer(make([]byte, 0, 4<<10), max)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if last, err := f(line); err != nil || last {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", broke, err)
	}
	return errNoEndFrame
}

// ---- files ----

// PutFile writes r to path inside the sandbox; mode 0 lets the daemon pick.
func (c *Client) PutFile(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) error {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	if r == nil {
		r = strings.NewReader("")
	}
	return c.doJSON(ctx, agent, http.MethodPut, sandboxPath(id, "/files"), q, r, nil)
}

// GetFile copies the file at path inside the sandbox to w.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.do(ctx, agent, http.MethodGet, sandboxPath(id, "/files"), url.Values{"path": {path}}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// FileEntry is one directory entry (Type: file, dir, symlink, other).
type FileEntry = wire.FileEntry

// ListFiles lists the directory at path inside the sandbox.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileEntry, error) {
	q := url.Values{"path": {path}, "list": {"1"}}
	var all []FileEntry
	for {
		var out wire.FileList
		if err := c.doJSON(ctx, agent, http.MethodGet, sandboxPath(id, "/files"), q, nil, &out); err != nil {
			return all, err
		}
		all = append(all, out.Entries...)
		if out.Next == "" {
			return all, nil
		}
		q.Set("after", out.Next)
	}
}

// ---- audit (operator) ----

// AuditRecord is one audit log record as the daemon sends it. Time and
// Data are kept exactly as sent, so exported records still verify.
type AuditRecord = wire.AuditRecord

// AuditTail returns up to limit records after seq after (limit 0: the
// daemon's default, 100; at most 1000).
func (c *Client) AuditTail(ctx context.Context, after int64, limit int) ([]AuditRecord, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out wire.AuditPage
	err := c.doJSON(ctx, operator, http.MethodGet, "/v1/audit", q, nil, &out)
	return out.Records, err
}

// AuditFollow calls fn with every record after seq after, as they are
// appended, until ctx ends (it then returns ctx's error), fn fails, or the
// stream breaks.
func (c *Client) AuditFollow(ctx context.Context, after int64, fn func(AuditRecord) error) error {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "follow": {"1"}}
	resp, err := c.do(ctx, operator, http.MethodGet, "/v1/audit", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var r AuditRecord
		if err := dec.Decode(&r); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == io.EOF {
				return errors.New("audit follow: the daemon ended the stream")
			}
			return fmt.Errorf("audit follow: %w", err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
}

// VerifyResult is the daemon's verdict on the audit chain (see
// audit.Result for the meaning of each field).
type VerifyResult = wire.AuditVerification

// VerifyCheckpoints is what the daemon found in its audit checkpoint file.
type VerifyCheckpoints = wire.AuditCheckpoints

// AuditVerify checks the whole chain on the daemon's side.
func (c *Client) AuditVerify(ctx context.Context) (VerifyResult, error) {
	var v VerifyResult
	err := c.doJSON(ctx, operator, http.MethodGet, "/v1/audit/verify", nil, nil, &v)
	return v, err
}

// AuditExport copies every record, as JSON lines, to w.
func (c *Client) AuditExport(ctx context.Context, w io.Writer) error {
	resp, err := c.do(ctx, operator, http.MethodGet, "/v1/audit/export", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}
