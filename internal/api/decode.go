package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/textsafe"
)

// duration is the JSON form of a duration ("30s") in the payloads the API
// builds (ceiling.go).
type duration = sandbox.Duration

// decodeJSON reads exactly one JSON value into v, refusing unknown fields
// and trailing data. An empty body is io.EOF. Errors other than a
// *http.MaxBytesError are 400s.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErr(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return nil
	case err == nil:
		return badRequest("the body holds more than one JSON value")
	default:
		return jsonErr(err)
	}
}

func jsonErr(err error) error {
	var tooBig *http.MaxBytesError
	var ae *apiError
	if errors.As(err, &tooBig) || errors.As(err, &ae) {
		return err
	}
	if err == io.EOF {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("malformed JSON: unexpected end of the body")
	}
	return badRequest("malformed JSON: " + err.Error())
}

// decodeCreate reads a create request. The result's spec, with defaults
// applied, validates; an empty body asks for every default.
func decodeCreate(r io.Reader) (session.CreateRequest, *execCall, error) {
	var b wire.CreateSandboxRequest
	if err := decodeJSON(r, &b); err != nil && err != io.EOF {
		return session.CreateRequest{}, nil, err
	}
	var first *execCall
	if b.Exec != nil {
		if b.Exec.Approval != "" {
			return session.CreateRequest{}, nil, badRequest("exec.approval: an approval names an existing sandbox; send that exec on its own (POST /v1/sandboxes/{id}/exec)")
		}
		call, err := execCallOf(*b.Exec)
		if err != nil {
			return session.CreateRequest{}, nil, badRequest("exec: " + classify(err).message)
		}
		first = &call
	}
	req, err := createRequest(b)
	return req, first, err
}

// createRequest turns the body into a validated create request.
func createRequest(b wire.CreateSandboxRequest) (session.CreateRequest, error) {
	var req session.CreateRequest
	if b.Image != "" {
		// A local image must be a clean absolute path; whether it (or a
		// registry reference) is allowed is the daemon's image policy.
		if err := session.CheckImageRef(b.Image); err != nil {
			return req, badRequest(err.Error())
		}
		req.Image = b.Image
	}
	env, err := envList(b.Env)
	if err != nil {
		return req, err
	}
	req.Spec.Env = env
	if l := b.Limits; l != nil {
		if l.Pids < 0 || l.OpenFiles < 0 || l.CPUs < 0 || math.IsNaN(l.CPUs) {
			return req, badRequest("limits must not be negative")
		}
		req.Spec.Limits = sandbox.Limits{
			MemoryBytes: int64(l.Memory), Pids: l.Pids, CPUs: l.CPUs, Timeout: time.Duration(l.Timeout),
			OutputBytes: int64(l.Output), WorkspaceBytes: int64(l.Workspace), TmpBytes: int64(l.Tmp), OpenFiles: l.OpenFiles,
		}
	}
	if b.Egress != nil {
		req.EgressAllow = b.Egress.Allow // checked by the session layer
	}
	req.Ports = b.Ports     // checked by the session layer
	req.Secrets = b.Secrets // checked by the session layer (package secrets)
	for _, v := range b.Volumes {
		req.Volumes = append(req.Volumes, session.VolumeMount(v)) // checked by the volumes
	}
	if err := checkLabels(b.Labels); err != nil {
		return req, err
	}
	req.Labels = b.Labels
	if len(b.Snapshot) > 64 {
		return req, badRequest("snapshot: not a snapshot id")
	}
	req.Snapshot = b.Snapshot
	req.TTL, req.Idle = time.Duration(b.TTL), time.Duration(b.Idle)
	if err := session.CheckIdleAction(b.IdleAction); err != nil {
		return req, badRequest("idle_action: want destroy or pause")
	}
	req.IdleAction = b.IdleAction
	if err := req.Spec.WithDefaults().Validate(); err != nil {
		return req, badRequest(strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": "))
	}
	return req, nil
}

func envList(m map[string]string) ([]string, error) {
	var out []string
	for k, v := range m {
		kv := k + "=" + v
		if strings.Contains(k, "=") {
			return nil, badRequest(fmt.Sprintf("env: %s is not a valid variable name", quote(k)))
		}
		if err := sandbox.ValidateEnv(kv); err != nil {
			return nil, badRequest("env: " + err.Error())
		}
		out = append(out, kv)
	}
	slices.Sort(out)
	return out, nil
}

// execCall is a decoded exec request.
type execCall struct {
	req sandbox.ExecRequest
	// line is the command line policies match: cmd as given, or argv
	// joined by spaces.
	line     string
	approval string // an approved exec.command request to spend, if any
}

// commandArgv checks exactly one of cmd and argv and returns the argv to
// run and the command line policies see.
func commandArgv(cmd *string, argv []string) ([]string, string, error) {
	var out []string
	var line string
	switch {
	case cmd != nil && argv != nil:
		return nil, "", badRequest("give either cmd or argv, not both")
	case cmd != nil:
		if strings.TrimSpace(*cmd) == "" {
			return nil, "", badRequest("empty command")
		}
		out, line = []string{"/bin/sh", "-c", *cmd}, *cmd
	case len(argv) == 0 || argv[0] == "":
		return nil, "", badRequest("empty command: give cmd or a non-empty argv")
	default:
		out, line = argv, strings.Join(argv, " ")
	}
	for _, a := range out {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, "", badRequest("the command contains a NUL byte")
		}
	}
	return out, line, nil
}

// decodeExec reads an exec request: exactly one of cmd and argv, a
// non-empty command without NUL bytes, valid env, a clean absolute cwd.
// Output writers are left for the caller.
func decodeExec(r io.Reader) (execCall, error) {
	var b wire.ExecRequest
	if err := decodeJSON(r, &b); err != nil {
		if err == io.EOF {
			return execCall{}, badRequest("empty body: a command (cmd or argv) is required")
		}
		return execCall{}, err
	}
	return execCallOf(b)
}

// execCallOf checks an exec request as decodeExec does.
func execCallOf(b wire.ExecRequest) (execCall, error) {
	argv, line, err := commandArgv(b.Cmd, b.Argv)
	if err != nil {
		return execCall{}, err
	}
	call := execCall{line: line, approval: b.Approval}
	req := &call.req
	req.Argv = argv
	if b.Cwd != "" && (!path.IsAbs(b.Cwd) || path.Clean(b.Cwd) != b.Cwd) {
		return execCall{}, badRequest(fmt.Sprintf("cwd %q must be a clean absolute path", b.Cwd))
	}
	req.Cwd = b.Cwd
	env, err := envList(b.Env)
	if err != nil {
		return execCall{}, err
	}
	req.Env = env
	req.Timeout = time.Duration(b.Timeout)
	if b.Stdin != nil {
		req.Stdin = bytes.NewReader([]byte(*b.Stdin))
	}
	return call, nil
}

// Label rules. Labels are shown to operators (CLI, console) and select
// sandboxes, so they are short, few and plain text; the ironclaw. prefix
// is the daemon's own (ironclaw.agent marks a spawned agent's sandbox), so
// no request can forge it.
const (
	maxLabels        = 32
	maxLabelKey      = 63
	maxLabelValue    = 255
	reservedLabelPfx = "ironclaw."
)

func checkLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return badRequest(fmt.Sprintf("%d labels is more than the %d allowed", len(labels), maxLabels))
	}
	for k, v := range labels {
		if k == "" || len(k) > maxLabelKey || len(v) > maxLabelValue {
			return badRequest(fmt.Sprintf("label %s: keys are 1-%d bytes, values at most %d", quote(k), maxLabelKey, maxLabelValue))
		}
		for i, c := range k {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && strings.ContainsRune("._/-", c)) {
				return badRequest(fmt.Sprintf("label key %s: letters, digits and . _ / - only, starting with a letter or digit", quote(k)))
			}
		}
		if strings.HasPrefix(strings.ToLower(k), reservedLabelPfx) {
			return badRequest(fmt.Sprintf("label key %s: the %s prefix is reserved for the daemon", quote(k), reservedLabelPfx))
		}
		if err := textsafe.Check("label "+k, v); err != nil {
			return badRequest(err.Error())
		}
	}
	return nil
}
