// Package kinds defines the kinds of approval requests: for each kind one
// typed payload, its strict decoding and validation, the summary and the
// decisive fields an operator is shown, and the action an approval of it
// carries out.
//
// The rule this package exists for: what an operator sees is derived from
// exactly the data that will be applied. A request's data is decoded and
// validated once, when it is filed (Decode), and stored in its canonical
// encoding (Encode); the summary and the fields are computed from that
// payload, never from text the requester wrote; and the action decodes the
// same stored bytes again. Text an agent writes about its request (the
// gateway's agent note) is kept apart and never becomes the summary.
//
// Values in Fields are exact (a host, an argv as JSON, a limit): whoever
// prints them escapes them for their medium (textsafe.Escape on a
// terminal, textContent in a page). Summaries are escaped already: they are
// one printable line.
//
// Adding a kind: a payload type with Kind, check, Summary, Fields and
// Apply in its own file, an entry in registry, a constant below, and a row
// in docs/http-api.md.
package kinds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/textsafe"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// The kinds.
const (
	KindEgressHost   = "egress.host"   // a sandbox reached a host off its allowlist
	KindSandboxWiden = "sandbox.widen" // more egress hosts, larger limits or a longer life for a sandbox
	KindToolRegister = "tool.register" // a new tool definition
	KindAgentSpawn   = "agent.spawn"   // a new sandbox running an agent's command
	KindExecCommand  = "exec.command"  // a command the policy marks as needing approval
	KindToolCall     = "tool.call"     // an SDK or adapter gating a tool it flags; no daemon action
	KindSecretUse    = "secret.use"    // a sandbox asked for a brokered secret whose grant is "ask"
)

// MaxDataBytes bounds a payload's encoding.
const MaxDataBytes = 64 << 10

// ErrInvalid wraps every problem with a payload.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid approval data")

// ErrUnavailable is an action whose part of the daemon is not running (an
// egress.host approval on a daemon without a broker).
var ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, "not available on this daemon")

// Payload is one kind's validated data. The concrete types are this
// package's (*EgressHost, *SandboxWiden, ...); only Decode makes them.
type Payload interface {
	// Kind is the kind's name.
	Kind() string
	// Summary is one printable line derived from the payload alone.
	Summary(t Target) string
	// Fields are the decisive fields, in the order to show them, in full.
	Fields(t Target) []Field
	// Apply carries out an approval. Its result becomes the approval's.
	Apply(ctx context.Context, env Env, t Target) (result map[string]any, err error)
	// check validates a decoded payload.
	check() error
}

// Field is one decisive field: what an operator must read to decide.
// Value is exact; escape it for the medium it is printed on. With Format
// "json" it is JSON text (an argv, a tool's arguments): print characters
// that must be escaped as JSON \u escapes there, which keeps it valid and
// exact.
type Field struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Format string `json:"format,omitempty"`
}

// FormatJSON marks a Field whose Value is JSON text.
const FormatJSON = "json"

// Target is what a payload's display and action need besides the payload:
// the request it belongs to.
type Target struct {
	ID          string // the approval
	Session     string // the sandbox it concerns, if any
	RequestedBy string // the principal who asked
	Scope       string // egress.host: the scope decided, "" while pending
}

// Env is what the actions act through. Nil members make the actions that
// need them fail with ErrUnavailable.
type Env struct {
	Sandboxes Sandboxes
	Egress    GlobalEgress
	Tools     ToolRegistry
	Agents    AgentStarter
	Secrets   SecretGrants
}

// Sandboxes is what the actions need of session.Manager.
type Sandboxes interface {
	AllowEgress(ctx context.Context, id string, rules []string) error
	UpdateLimits(ctx context.Context, id string, l sandbox.Limits) error
	SetLifetime(ctx context.Context, id string, ttl, idle time.Duration) error
	Create(ctx context.Context, principal string, req session.CreateRequest) (session.Info, error)
}

// GlobalEgress adds a rule to every sandbox's allowlist, durably.
type GlobalEgress interface {
	AllowGlobal(ctx context.Context, rule, approval string) error
}

// ToolRegistry stores approved tool definitions (tools.Registry).
type ToolRegistry interface {
	Register(ctx context.Context, t tools.Tool, approval string) (tools.Tool, error)
}

// AgentStarter runs a spawned agent's command in its new sandbox in the
// background and returns where its output will be.
type AgentStarter interface {
	StartAgent(approval, principal, sandboxID string, argv []string) (output string)
}

// registry makes an empty payload of each kind.
var registry = map[string]func() Payload{
	KindEgressHost:   func() Payload { return new(EgressHost) },
	KindSandboxWiden: func() Payload { return new(SandboxWiden) },
	KindToolRegister: func() Payload { return new(ToolRegister) },
	KindAgentSpawn:   func() Payload { return new(AgentSpawn) },
	KindExecCommand:  func() Payload { return new(ExecCommand) },
	KindToolCall:     func() Payload { return new(ToolCall) },
	KindSecretUse:    func() Payload { return new(SecretUse) },
}

// Names lists every kind, in a fixed order.
func Names() []string {
	return []string{KindEgressHost, KindSandboxWiden, KindToolRegister, KindAgentSpawn, KindExecCommand, KindToolCall, KindSecretUse}
}

// NeedsSession tells which kinds act on one sandbox and so must name it.
func NeedsSession(kind string) bool {
	switch kind {
	case KindEgressHost, KindSandboxWiden, KindExecCommand, KindSecretUse:
		return true
	}
	return false
}

// Decode reads a kind's data strictly (one JSON object, no unknown,
// duplicate or case-variant keys, nothing after it) and validates it.
func Decode(kind string, data []byte) (Payload, error) {
	mk, ok := registry[kind]
	if !ok {
		return nil, fmt.Errorf("%w: unknown kind %q (want one of %s)", ErrInvalid, kind, strings.Join(Names(), ", "))
	}
	if len(data) > MaxDataBytes {
		return nil, fmt.Errorf("%w: %s data is %d bytes, more than %d", ErrInvalid, kind, len(data), MaxDataBytes)
	}
	p := mk()
	if err := decodeStrict(data, p); err != nil {
		return nil, fmt.Errorf("%w: %s data: %v", ErrInvalid, kind, err)
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, kind, err)
	}
	return p, nil
}

// Encode is a payload's canonical encoding, what the gateway stores.
func Encode(p Payload) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("%w: %s data: %v", ErrInvalid, p.Kind(), err)
	}
	out := bytes.TrimRight(b.Bytes(), "\n")
	if len(out) > MaxDataBytes {
		return nil, fmt.Errorf("%w: %s data is %d bytes, more than %d", ErrInvalid, p.Kind(), len(out), MaxDataBytes)
	}
	return out, nil
}

// Canonical decodes any value that marshals to a kind's data (a payload, a
// map, raw JSON) and returns the validated payload and its encoding.
func Canonical(kind string, data any) (Payload, []byte, error) {
	var raw []byte
	switch d := data.(type) {
	case nil:
		raw = []byte("{}")
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		var err error
		if raw, err = json.Marshal(d); err != nil {
			return nil, nil, fmt.Errorf("%w: %s data: %v", ErrInvalid, kind, err)
		}
	}
	p, err := Decode(kind, raw)
	if err != nil {
		return nil, nil, err
	}
	enc, err := Encode(p)
	if err != nil {
		return nil, nil, err
	}
	return p, enc, nil
}

// decodeStrict reads exactly one JSON object into v.
func decodeStrict(data []byte, v any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return errors.New("empty: a JSON object is required")
	}
	if trimmed[0] != '{' {
		return errors.New("must be a JSON object")
	}
	if err := checkKeys(trimmed); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	return nil
}

func jsonProblem(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: want %s", te.Field, te.Type)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("malformed JSON: unexpected end")
	}
	return err
}

// checkKeys refuses an object, at any depth, that holds one key twice,
// also when they differ only in case: encoding/json would take the last
// (and match field names in any case), while another reader of the same
// bytes may take the first.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		object, wantKey bool
		seen            map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return jsonProblem(err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if top != nil && top.object {
					top.wantKey = true // the container is the value
				}
				stack = append(stack, &frame{object: d == '{', wantKey: d == '{', seen: map[string]bool{}})
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if top == nil || !top.object {
			continue
		}
		if !top.wantKey {
			top.wantKey = true
			continue
		}
		k := strings.ToLower(tok.(string))
		if top.seen[k] {
			return fmt.Errorf("the key %q appears twice in one object (keys are compared ignoring case)", tok)
		}
		top.seen[k] = true
		top.wantKey = false
	}
}

// Duration and Bytes are the JSON forms of durations and sizes the HTTP
// API uses too.
type (
	Duration = sandbox.Duration
	Bytes    = sandbox.Bytes
)

// ---- display helpers ----

// jsonText is v as compact JSON that keeps non-ASCII as is (the printer
// escapes what must be escaped).
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("%v", v)
	}
	return strings.TrimRight(b.String(), "\n")
}

// maxSummary bounds a summary; the fields carry everything in full.
const maxSummary = 300

// summary joins escaped parts into one line of at most maxSummary bytes.
func summary(parts ...string) string {
	s := strings.Join(parts, " ")
	if len(s) <= maxSummary {
		return s
	}
	cut := maxSummary
	for cut > 0 && s[cut]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + "… (see the fields)"
}

// argvWords is an argv for a summary: escaped words, quoted where they
// hold a space or a quote.
func argvWords(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		e := esc(a)
		if e == "" || strings.ContainsAny(e, " \"'") {
			e = `"` + strings.ReplaceAll(e, `"`, `\"`) + `"`
		}
		words[i] = e
	}
	return strings.Join(words, " ")
}

// esc escapes one value for a summary.
func esc(s string) string { return textsafe.Escape(s) }

func sandboxName(id string) string {
	if id == "" {
		return "(no sandbox)"
	}
	return id
}

func bytesField(name string, n int64) Field {
	return Field{Name: name, Value: fmt.Sprintf("%s (%d bytes)", sandbox.FormatBytes(n), n)}
}

// limitFields shows the limits that are set, one field each.
func limitFields(l sandbox.Limits, ttl, idle time.Duration) []Field {
	var out []Field
	if l.MemoryBytes != 0 {
		out = append(out, bytesField("memory", l.MemoryBytes))
	}
	if l.Pids != 0 {
		out = append(out, Field{Name: "pids", Value: fmt.Sprint(l.Pids)})
	}
	if l.CPUs != 0 {
		out = append(out, Field{Name: "cpus", Value: fmt.Sprint(l.CPUs)})
	}
	if l.Timeout != 0 {
		out = append(out, Field{Name: "timeout", Value: l.Timeout.String() + " per command"})
	}
	if l.OutputBytes != 0 {
		out = append(out, bytesField("output", l.OutputBytes))
	}
	if l.WorkspaceBytes != 0 {
		out = append(out, bytesField("workspace", l.WorkspaceBytes))
	}
	if l.TmpBytes != 0 {
		out = append(out, bytesField("tmp", l.TmpBytes))
	}
	if l.OpenFiles != 0 {
		out = append(out, Field{Name: "open files", Value: fmt.Sprint(l.OpenFiles)})
	}
	if ttl != 0 {
		out = append(out, Field{Name: "ttl", Value: ttl.String() + " from the sandbox's creation"})
	}
	if idle != 0 {
		out = append(out, Field{Name: "idle", Value: idle.String() + " without use"})
	}
	return out
}

// limitWords is limits for a summary: "memory 1GiB, ttl 2h0m0s".
func limitWords(fields []Field) string {
	words := make([]string, 0, len(fields))
	for _, f := range fields {
		v, _, _ := strings.Cut(f.Value, " (")
		v, _, _ = strings.Cut(v, " per ")
		v, _, _ = strings.Cut(v, " from ")
		v, _, _ = strings.Cut(v, " without ")
		words = append(words, f.Name+" "+v)
	}
	return strings.Join(words, ", ")
}

// checkLabel refuses a label key or value that could deceive on display,
// and the daemon's own prefix.
func checkLabel(k, v string) error {
	switch {
	case k == "" || len(k) > 63 || len(v) > 255:
		return fmt.Errorf("label %q: keys are 1-63 bytes, values at most 255", k)
	case strings.HasPrefix(strings.ToLower(k), "ironclaw."):
		return fmt.Errorf("label %q: the ironclaw. prefix is the daemon's", k)
	}
	if err := textsafe.Check("label key", k); err != nil {
		return err
	}
	return textsafe.Check("label "+k, v)
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
