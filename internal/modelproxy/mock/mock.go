// Package mock is an offline, deterministic stand-in for the OpenAI and
// Anthropic APIs. The model proxy mounts it when no provider key is
// configured, so demos, tests and real framework agent loops (official SDKs,
// Vercel AI SDK, Mastra, ...) run with zero credentials.
//
// Endpoints (paths as seen after the proxy strips its mount prefix; a missing
// leading "/v1" is tolerated):
//
//	OpenAI():    POST /v1/chat/completions, POST /v1/responses,
//	             GET /v1/models, GET /v1/models/{id}, POST /v1/embeddings
//	Anthropic(): POST /v1/messages, POST /v1/messages/count_tokens,
//	             GET /v1/models, GET /v1/models/{id}
//
// Every endpoint answers in the provider's own wire format, streaming (SSE)
// or not. The reply for a request is chosen, in order:
//
//  1. Script mode: if a Script is set and the conversation already holds n
//     assistant turns with n < len(Script.Turns), Script.Turns[n] is replied
//     verbatim (text and/or tool calls; script tool calls are not checked
//     against the offered tools). The turn index is derived from the request
//     alone, so the provider stays stateless and deterministic.
//  2. Tool results: if the conversation ends with tool results (OpenAI "tool"
//     messages, Responses "function_call_output" items, Anthropic
//     "tool_result" blocks) the reply is the text
//     "Tool results: <name>: <result>" with one line per result, each result
//     truncated to 2000 characters.
//  3. Directive: if the last user message contains a JSON object with the key
//     "mock_tool_calls", e.g.
//     {"mock_tool_calls":[{"name":"shell","arguments":{"command":"id"}}]},
//     possibly embedded in prose, the reply is exactly those tool calls.
//     Every name must be a tool offered by the request. A directive naming a
//     tool that is not offered, or a malformed directive, is NOT an HTTP
//     error: the reply is an ordinary assistant text message such as
//     `mock: unknown tool "x"; offered: a, b`. This keeps agent loops running
//     (the agent sees the explanation as model output) and mirrors how a real
//     model would refuse an impossible instruction.
//  4. Echo: "mock: <last user text, truncated to 200 characters>".
//
// Ids are derived from a hash of the request body and from the turn index;
// timestamps are fixed at 0. Token counts are word counts. Malformed requests
// get a 400 and unknown paths a 404, both in the provider's error body shape.
//
// Not supported: Responses "previous_response_id" (the provider keeps no
// state; such requests are answered from the items they carry), tool_choice,
// n > 1, logprobs, images/audio.
package mock

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"unicode/utf8"
)

// Script is a scripted list of assistant turns, loaded with LoadScript.
type Script struct {
	Turns []Turn `json:"turns"`
}

// Turn is one scripted assistant reply: text, tool calls, or both.
type Turn struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is a tool invocation; Arguments must be a JSON object (a JSON
// string holding an object is accepted too; missing means {}).
type ToolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// LoadScript reads a JSON script file: either {"turns":[...]} or a bare
// array of turns.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mock script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("mock script %s: %w", path, err)
	}
	return s, nil
}

// ParseScript parses and validates the JSON form accepted by LoadScript.
func ParseScript(data []byte) (*Script, error) {
	data = bytes.TrimSpace(data)
	var s Script
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &s.Turns); err != nil {
			return nil, err
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, err
		}
	}
	for i := range s.Turns {
		t := &s.Turns[i]
		if t.Text == "" && len(t.ToolCalls) == 0 {
			return nil, fmt.Errorf("turn %d: needs text or tool_calls", i)
		}
		for j := range t.ToolCalls {
			c := &t.ToolCalls[j]
			if c.Name == "" {
				return nil, fmt.Errorf("turn %d tool call %d: missing name", i, j)
			}
			args, err := normalizeArgs(c.Arguments)
			if err != nil {
				return nil, fmt.Errorf("turn %d tool call %d (%s): %w", i, j, c.Name, err)
			}
			c.Arguments = args
		}
	}
	return &s, nil
}

// Provider serves the mock APIs. The zero value is not usable; call New.
type Provider struct {
	// Script, if non-nil, supplies scripted turns (see package doc).
	Script *Script
	// OpenAIModels and AnthropicModels are listed by /v1/models. Requests
	// may name any model; it is echoed back.
	OpenAIModels    []string
	AnthropicModels []string
	// EmbeddingDims is the default embedding length (8).
	EmbeddingDims int
}

// New returns a provider with default model names; script may be nil.
func New(script *Script) *Provider {
	return &Provider{
		Script:          script,
		OpenAIModels:    []string{"mock-gpt", "mock-gpt-mini", "mock-embedding"},
		AnthropicModels: []string{"mock-claude", "mock-claude-haiku"},
		EmbeddingDims:   8,
	}
}

const (
	maxBody        = 32 << 20
	maxEchoRunes   = 200
	maxResultRunes = 2000
	directiveKey   = "mock_tool_calls"
)

// ---- normalized conversation ----

type callRef struct{ id, name string }

// message is a provider-neutral view of one conversation entry.
type message struct {
	role       string // system, user, assistant, tool
	text       string
	hasText    bool // user message carried text parts (not only tool results/images)
	calls      []callRef
	toolCallID string
	toolName   string
	isError    bool
}

type conversation struct {
	msgs  []message
	tools []string
}

type toolResult struct {
	name, text string
	isError    bool
}

// assistantTurns counts runs of consecutive assistant entries.
func (c *conversation) assistantTurns() int {
	n := 0
	prev := ""
	for _, m := range c.msgs {
		if m.role == "assistant" && prev != "assistant" {
			n++
		}
		prev = m.role
	}
	return n
}

// trailingToolResults returns the tool results that end the conversation.
func (c *conversation) trailingToolResults() []toolResult {
	start := len(c.msgs)
	for start > 0 && c.msgs[start-1].role == "tool" {
		start--
	}
	var out []toolResult
	for i := start; i < len(c.msgs); i++ {
		m := c.msgs[i]
		name := m.toolName
		if name == "" {
			name = c.callName(m.toolCallID, start)
		}
		if name == "" {
			name = m.toolCallID
		}
		if name == "" {
			name = "tool"
		}
		out = append(out, toolResult{name: name, text: m.text, isError: m.isError})
	}
	return out
}

// callName finds the tool name of the most recent call with id before index end.
func (c *conversation) callName(id string, end int) string {
	if id == "" {
		return ""
	}
	for i := end - 1; i >= 0; i-- {
		for _, cr := range c.msgs[i].calls {
			if cr.id == id {
				return cr.name
			}
		}
	}
	return ""
}

func (c *conversation) lastUserText() (string, bool) {
	for i := len(c.msgs) - 1; i >= 0; i-- {
		m := c.msgs[i]
		if m.role == "user" && m.hasText {
			return m.text, true
		}
	}
	return "", false
}

func (c *conversation) promptTokens() int {
	n := 0
	for _, m := range c.msgs {
		n += countWords(m.text)
		for _, cr := range m.calls {
			n += countWords(cr.name)
		}
	}
	if n == 0 {
		n = 1
	}
	return n
}

// ---- reply selection ----

type reply struct {
	text  string
	calls []ToolCall
	turn  int // assistant turns already in the conversation
}

func (r reply) completionTokens() int {
	n := countWords(r.text)
	for _, c := range r.calls {
		n += countWords(c.Name) + countWords(string(c.Arguments))
	}
	return n
}

func (p *Provider) decide(c *conversation) reply {
	turn := c.assistantTurns()
	r := reply{turn: turn}
	if p.Script != nil && turn < len(p.Script.Turns) {
		t := p.Script.Turns[turn]
		r.text = t.Text
		r.calls = append([]ToolCall(nil), t.ToolCalls...)
		for i := range r.calls {
			if args, err := normalizeArgs(r.calls[i].Arguments); err == nil {
				r.calls[i].Arguments = args
			} else {
				r.calls[i].Arguments = json.RawMessage("{}")
			}
		}
		return r
	}
	if res := c.trailingToolResults(); len(res) > 0 {
		lines := make([]string, len(res))
		for i, tr := range res {
			label := tr.name
			if tr.isError {
				label += " (error)"
			}
			lines[i] = label + ": " + truncate(tr.text, maxResultRunes)
		}
		r.text = "Tool results: " + strings.Join(lines, "\n")
		return r
	}
	user, ok := c.lastUserText()
	if !ok {
		r.text = "mock: (no user message)"
		return r
	}
	calls, found, err := findDirective(user)
	if found {
		if err != nil {
			r.text = "mock: invalid " + directiveKey + ": " + err.Error()
			return r
		}
		offered := map[string]bool{}
		for _, t := range c.tools {
			offered[t] = true
		}
		for _, call := range calls {
			if !offered[call.Name] {
				list := "none"
				if len(c.tools) > 0 {
					list = strings.Join(c.tools, ", ")
				}
				r.text = fmt.Sprintf("mock: unknown tool %q; offered: %s", call.Name, list)
				return r
			}
		}
		r.calls = calls
		return r
	}
	r.text = "mock: " + truncate(user, maxEchoRunes)
	return r
}

// findDirective scans text for a JSON object holding the directive key.
// found reports whether such an object exists; err whether it is malformed.
func findDirective(text string) (calls []ToolCall, found bool, err error) {
	if !strings.Contains(text, directiveKey) {
		return nil, false, nil
	}
	for i := 0; i < len(text); i++ {
		if text[i] != '{' {
			continue
		}
		var obj map[string]json.RawMessage
		if json.NewDecoder(strings.NewReader(text[i:])).Decode(&obj) != nil {
			continue
		}
		raw, ok := obj[directiveKey]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, &calls); err != nil {
			return nil, true, errors.New("want an array of {\"name\":...,\"arguments\":{...}}")
		}
		if len(calls) == 0 {
			return nil, true, errors.New("empty list")
		}
		for j := range calls {
			if calls[j].Name == "" {
				return nil, true, fmt.Errorf("call %d has no name", j)
			}
			args, err := normalizeArgs(calls[j].Arguments)
			if err != nil {
				return nil, true, fmt.Errorf("call %d (%s): %v", j, calls[j].Name, err)
			}
			calls[j].Arguments = args
		}
		return calls, true, nil
	}
	return nil, false, nil
}

// normalizeArgs returns compact JSON object text for raw.
func normalizeArgs(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage("{}"), nil
	}
	if t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return nil, err
		}
		t = bytes.TrimSpace([]byte(s))
		if len(t) == 0 {
			return json.RawMessage("{}"), nil
		}
	}
	if t[0] != '{' || !json.Valid(t) {
		return nil, errors.New("arguments must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return nil, err
	}
	return json.RawMessage(buf.Bytes()), nil
}

// ---- helpers ----

// textOf extracts readable text from a content value: a string, an array of
// strings/parts with "text", or an object with "text"; other JSON is
// returned compacted.
func textOf(raw json.RawMessage) (string, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return "", false
	}
	switch t[0] {
	case '"':
		var s string
		if json.Unmarshal(t, &s) == nil {
			return s, true
		}
	case '[':
		var parts []json.RawMessage
		if json.Unmarshal(t, &parts) == nil {
			var texts []string
			got := false
			for _, p := range parts {
				if s, ok := textOf(p); ok {
					texts = append(texts, s)
					got = true
				}
			}
			return strings.Join(texts, "\n"), got
		}
	case '{':
		var part struct {
			Type string          `json:"type"`
			Text *string         `json:"text"`
			Cont json.RawMessage `json:"content"`
		}
		if json.Unmarshal(t, &part) == nil {
			if part.Text != nil {
				return *part.Text, true
			}
			if part.Type != "" {
				// image, file, audio, ...: no text
				return "", false
			}
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, t) == nil {
		return buf.String(), true
	}
	return string(t), true
}

func countWords(s string) int { return len(strings.Fields(s)) }

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + "…"
}

func hashID(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:12])
}

// splitWords splits s into pieces that concatenate back to s, one word
// (with its trailing whitespace) per piece.
func splitWords(s string) []string {
	var out []string
	start := 0
	inSpace := false
	for i, r := range s {
		space := r == ' ' || r == '\n' || r == '\t' || r == '\r'
		if !space && inSpace && i > start {
			out = append(out, s[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// splitRunes splits s into pieces of at most size bytes at rune boundaries.
func splitRunes(s string, size int) []string {
	var out []string
	for len(s) > 0 {
		end := size
		if end >= len(s) {
			out = append(out, s)
			break
		}
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		if end == 0 {
			_, end = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// normPath strips a trailing slash and ensures a leading "/v1".
func normPath(p string) string {
	p = strings.TrimRight(p, "/")
	if !strings.HasPrefix(p, "/v1/") && p != "/v1" {
		p = "/v1" + p
	}
	return p
}

// route is one endpoint of a wire format: a path, or a path prefix when
// it ends in "/", and the one method it answers.
type route struct {
	path   string
	method string
	serve  http.HandlerFunc
}

// routes is a wire format's handler: the first route whose path matches
// (after normPath) serves; another method gets the format's notAllowed
// error, with the Allow header set, and a path no route matches its
// notFound error.
func routes(table []route, notAllowed, notFound http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := normPath(r.URL.Path)
		for _, rt := range table {
			prefix := strings.HasSuffix(rt.path, "/")
			if path != rt.path && !(prefix && strings.HasPrefix(path, rt.path)) {
				continue
			}
			if r.Method != rt.method {
				w.Header().Set("Allow", rt.method)
				notAllowed(w, r)
				return
			}
			rt.serve(w, r)
			return
		}
		notFound(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// sseWriter writes server-sent events and flushes after each.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) event(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.raw(name, string(b))
}

func (s *sseWriter) raw(name, data string) {
	var buf strings.Builder
	if name != "" {
		buf.WriteString("event: " + name + "\n")
	}
	buf.WriteString("data: " + data + "\n\n")
	_, _ = s.w.Write([]byte(buf.String()))
	_ = s.rc.Flush()
}
