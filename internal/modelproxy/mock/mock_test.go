package mock

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ---- harness ----

type call struct {
	ID, Name, Args string
}

// result is a format-neutral view of one assistant reply.
type result struct {
	Text   string
	Calls  []call
	Finish string // stop / tool_calls (normalized)
}

type loop struct {
	call   call
	output string
}

var formats = []string{"chat", "responses", "anthropic"}

func buildRequest(t *testing.T, format string, tools []string, user string, stream bool, hist *loop) (path string, body []byte) {
	t.Helper()
	var req map[string]any
	switch format {
	case "chat":
		msgs := []any{map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": user}}
		if hist != nil {
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
					"id": hist.call.ID, "type": "function",
					"function": map[string]any{"name": hist.call.Name, "arguments": hist.call.Args}}}},
				map[string]any{"role": "tool", "tool_call_id": hist.call.ID, "content": hist.output})
		}
		var ts []any
		for _, n := range tools {
			ts = append(ts, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": map[string]any{"type": "object"}}})
		}
		req = map[string]any{"model": "gpt-4o-mini", "messages": msgs, "stream": stream}
		if ts != nil {
			req["tools"] = ts
		}
		if stream {
			req["stream_options"] = map[string]any{"include_usage": true}
		}
		path = "/v1/chat/completions"
	case "responses":
		input := []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": user}}}}
		if hist != nil {
			input = append(input,
				map[string]any{"type": "function_call", "call_id": hist.call.ID, "name": hist.call.Name, "arguments": hist.call.Args},
				map[string]any{"type": "function_call_output", "call_id": hist.call.ID, "output": hist.output})
		}
		var ts []any
		for _, n := range tools {
			ts = append(ts, map[string]any{"type": "function", "name": n, "parameters": map[string]any{"type": "object"}})
		}
		req = map[string]any{"model": "gpt-4o-mini", "input": input, "instructions": "be brief", "stream": stream}
		if ts != nil {
			req["tools"] = ts
		}
		path = "/v1/responses"
	case "anthropic":
		msgs := []any{map[string]any{"role": "user", "content": user}}
		if hist != nil {
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": []any{
					map[string]any{"type": "text", "text": "Let me check."},
					map[string]any{"type": "tool_use", "id": hist.call.ID, "name": hist.call.Name, "input": json.RawMessage(hist.call.Args)}}},
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "tool_result", "tool_use_id": hist.call.ID,
						"content": []any{map[string]any{"type": "text", "text": hist.output}}}}})
		}
		var ts []any
		for _, n := range tools {
			ts = append(ts, map[string]any{"name": n, "input_schema": map[string]any{"type": "object"}})
		}
		req = map[string]any{"model": "claude-sonnet-4", "max_tokens": 1024, "system": "be brief", "messages": msgs, "stream": stream}
		if ts != nil {
			req["tools"] = ts
		}
		path = "/v1/messages"
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

func do(t *testing.T, h http.Handler, method, path string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type sseEvent struct {
	Name string
	Data string
}

func parseSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Data != "" || cur.Name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if cur.Data != "" {
		t.Fatalf("unterminated SSE event %+v", cur)
	}
	return out
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
}

// run sends the request and normalizes the reply, checking wire details.
func run(t *testing.T, p *Provider, format string, stream bool, path string, body []byte) result {
	t.Helper()
	h := p.OpenAI()
	if format == "anthropic" {
		h = p.Anthropic()
	}
	w := do(t, h, http.MethodPost, path, body)
	if w.Code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", format, w.Code, w.Body)
	}
	ct := w.Header().Get("Content-Type")
	if stream != strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("%s stream=%v: content-type %q", format, stream, ct)
	}
	switch format {
	case "chat":
		if stream {
			return chatStream(t, parseSSE(t, w.Body.String()))
		}
		return chatPlain(t, w.Body.Bytes())
	case "responses":
		if stream {
			return respStream(t, parseSSE(t, w.Body.String()))
		}
		var obj respObject
		mustJSON(t, w.Body.String(), &obj)
		return respFromObject(t, obj)
	default:
		if stream {
			return anStream(t, parseSSE(t, w.Body.String()))
		}
		return anPlain(t, w.Body.Bytes())
	}
}

func chatPlain(t *testing.T, b []byte) result {
	t.Helper()
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role      string         `json:"role"`
				Content   *string        `json:"content"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage oaUsage `json:"usage"`
	}
	mustJSON(t, string(b), &c)
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-mock-") || c.Model != "gpt-4o-mini" || len(c.Choices) != 1 {
		t.Fatalf("bad completion: %s", b)
	}
	if c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens || c.Usage.PromptTokens == 0 {
		t.Fatalf("bad usage %+v", c.Usage)
	}
	m := c.Choices[0].Message
	if m.Role != "assistant" {
		t.Fatalf("role %q", m.Role)
	}
	var r result
	if m.Content != nil {
		r.Text = *m.Content
	}
	for _, tc := range m.ToolCalls {
		if tc.Type != "function" {
			t.Fatalf("tool call type %q", tc.Type)
		}
		r.Calls = append(r.Calls, call{tc.ID, tc.Function.Name, tc.Function.Arguments})
	}
	r.Finish = c.Choices[0].FinishReason
	return r
}

func chatStream(t *testing.T, evs []sseEvent) result {
	t.Helper()
	if len(evs) < 4 || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("stream must end with [DONE]: %+v", evs)
	}
	var r result
	sawRole, sawUsage := false, false
	for i, ev := range evs[:len(evs)-1] {
		var ch struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Role      string         `json:"role"`
					Content   *string        `json:"content"`
					ToolCalls []chatToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *oaUsage `json:"usage"`
		}
		mustJSON(t, ev.Data, &ch)
		if ch.Object != "chat.completion.chunk" {
			t.Fatalf("object %q", ch.Object)
		}
		if ch.Usage != nil {
			sawUsage = true
			if len(ch.Choices) != 0 || ch.Usage.TotalTokens == 0 {
				t.Fatalf("bad usage chunk %s", ev.Data)
			}
			continue
		}
		d := ch.Choices[0].Delta
		if i == 0 {
			sawRole = d.Role == "assistant"
		}
		if d.Content != nil {
			r.Text += *d.Content
		}
		for _, tc := range d.ToolCalls {
			idx := *tc.Index
			if idx == len(r.Calls) {
				if tc.ID == "" || tc.Function.Name == "" || tc.Type != "function" {
					t.Fatalf("first tool delta needs id/name: %s", ev.Data)
				}
				r.Calls = append(r.Calls, call{ID: tc.ID, Name: tc.Function.Name})
			}
			r.Calls[idx].Args += tc.Function.Arguments
		}
		if ch.Choices[0].FinishReason != nil {
			r.Finish = *ch.Choices[0].FinishReason
		}
	}
	if !sawRole || !sawUsage {
		t.Fatalf("role chunk %v usage chunk %v", sawRole, sawUsage)
	}
	return r
}

func respFromObject(t *testing.T, obj respObject) result {
	t.Helper()
	if obj.Object != "response" || obj.Status != "completed" || !strings.HasPrefix(obj.ID, "resp_mock_") || obj.Usage == nil {
		t.Fatalf("bad response object %+v", obj)
	}
	r := result{Finish: "stop"}
	for _, it := range obj.Output {
		switch it.Type {
		case "message":
			if it.Role != "assistant" || len(it.Content) != 1 || it.Content[0].Type != "output_text" {
				t.Fatalf("bad message item %+v", it)
			}
			r.Text += it.Content[0].Text
		case "function_call":
			r.Calls = append(r.Calls, call{it.CallID, it.Name, *it.Arguments})
			r.Finish = "tool_calls"
		default:
			t.Fatalf("unexpected item %+v", it)
		}
	}
	return r
}

func respStream(t *testing.T, evs []sseEvent) result {
	t.Helper()
	var r result
	var final *respObject
	args := map[string]string{}
	var types []string
	for i, ev := range evs {
		var e struct {
			Type     string          `json:"type"`
			Seq      int             `json:"sequence_number"`
			ItemID   string          `json:"item_id"`
			Delta    string          `json:"delta"`
			Text     string          `json:"text"`
			Args     string          `json:"arguments"`
			Item     respItem        `json:"item"`
			Response json.RawMessage `json:"response"`
		}
		mustJSON(t, ev.Data, &e)
		if e.Type != ev.Name || e.Seq != i {
			t.Fatalf("event %d: name %q type %q seq %d", i, ev.Name, e.Type, e.Seq)
		}
		types = append(types, e.Type)
		switch e.Type {
		case "response.output_text.delta":
			r.Text += e.Delta
		case "response.output_text.done":
			if e.Text != r.Text {
				t.Fatalf("text done %q != deltas %q", e.Text, r.Text)
			}
		case "response.function_call_arguments.delta":
			args[e.ItemID] += e.Delta
		case "response.function_call_arguments.done":
			if args[e.ItemID] != e.Args {
				t.Fatalf("args done %q != deltas %q", e.Args, args[e.ItemID])
			}
		case "response.output_item.done":
			if e.Item.Type == "function_call" {
				if args[e.Item.ID] != *e.Item.Arguments {
					t.Fatalf("item args mismatch")
				}
				r.Calls = append(r.Calls, call{e.Item.CallID, e.Item.Name, args[e.Item.ID]})
			}
		case "response.completed":
			final = &respObject{}
			mustJSON(t, string(e.Response), final)
		}
	}
	if types[0] != "response.created" || types[len(types)-1] != "response.completed" || final == nil {
		t.Fatalf("bad event sequence %v", types)
	}
	r.Finish = "stop"
	if len(r.Calls) > 0 {
		r.Finish = "tool_calls"
	}
	if fr := respFromObject(t, *final); !reflect.DeepEqual(fr, r) {
		t.Fatalf("completed response %+v != streamed %+v", fr, r)
	}
	return r
}

func anPlain(t *testing.T, b []byte) result {
	t.Helper()
	var m struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		Role       string `json:"role"`
		Model      string `json:"model"`
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
		Usage anUsage `json:"usage"`
	}
	mustJSON(t, string(b), &m)
	if m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_mock_") || m.Model != "claude-sonnet-4" || m.Usage.InputTokens == 0 {
		t.Fatalf("bad message %s", b)
	}
	var r result
	for _, c := range m.Content {
		switch c.Type {
		case "text":
			r.Text += c.Text
		case "tool_use":
			if len(c.Input) == 0 || c.Input[0] != '{' {
				t.Fatalf("tool_use input must be an object: %s", b)
			}
			r.Calls = append(r.Calls, call{c.ID, c.Name, string(c.Input)})
		}
	}
	r.Finish = map[string]string{"end_turn": "stop", "tool_use": "tool_calls"}[m.StopReason]
	return r
}

func anStream(t *testing.T, evs []sseEvent) result {
	t.Helper()
	var r result
	var names []string
	open := -1
	for _, ev := range evs {
		var e struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				ID string `json:"id"`
			} `json:"message"`
			Block struct {
				Type string `json:"type"`
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *anUsage `json:"usage"`
		}
		mustJSON(t, ev.Data, &e)
		if e.Type != ev.Name {
			t.Fatalf("event %q carries type %q", ev.Name, e.Type)
		}
		names = append(names, e.Type)
		switch e.Type {
		case "content_block_start":
			if open != -1 {
				t.Fatalf("block %d still open", open)
			}
			open = e.Index
			if e.Block.Type == "tool_use" {
				r.Calls = append(r.Calls, call{ID: e.Block.ID, Name: e.Block.Name})
			}
		case "content_block_delta":
			if e.Index != open {
				t.Fatalf("delta for block %d, open %d", e.Index, open)
			}
			switch e.Delta.Type {
			case "text_delta":
				r.Text += e.Delta.Text
			case "input_json_delta":
				r.Calls[len(r.Calls)-1].Args += e.Delta.PartialJSON
			}
		case "content_block_stop":
			open = -1
		case "message_delta":
			r.Finish = map[string]string{"end_turn": "stop", "tool_use": "tool_calls"}[e.Delta.StopReason]
			if e.Usage == nil || e.Usage.OutputTokens == 0 {
				t.Fatalf("message_delta without usage: %s", ev.Data)
			}
		}
	}
	if names[0] != "message_start" || names[len(names)-1] != "message_stop" {
		t.Fatalf("bad event sequence %v", names)
	}
	return r
}

// ---- tests ----

const directive = `Please run it: {"mock_tool_calls":[{"name":"shell","arguments":{"command":"id"}}]} thanks`

func TestFormats(t *testing.T) {
	p := New(nil)
	cases := []struct {
		name  string
		tools []string
		user  string
		hist  *loop
		want  result // call IDs are ignored
	}{
		{"echo", nil, "hello there, mock world", nil,
			result{Text: "mock: hello there, mock world", Finish: "stop"}},
		{"echo truncated", nil, strings.Repeat("ab ", 100), nil,
			result{Text: "mock: " + strings.Repeat("ab ", 100)[:200] + "…", Finish: "stop"}},
		{"directive", []string{"read", "shell"}, directive, nil,
			result{Calls: []call{{Name: "shell", Args: `{"command":"id"}`}}, Finish: "tool_calls"}},
		{"two calls, string args", []string{"read", "shell"},
			`{"mock_tool_calls":[{"name":"read","arguments":"{\"path\": \"/etc/hostname\"}"},{"name":"shell"}]}`, nil,
			result{Calls: []call{{Name: "read", Args: `{"path":"/etc/hostname"}`}, {Name: "shell", Args: `{}`}}, Finish: "tool_calls"}},
		{"unicode args", []string{"shell"}, `{"mock_tool_calls":[{"name":"shell","arguments":{"command":"echo héllo wörld ✓ 日本語"}}]}`, nil,
			result{Calls: []call{{Name: "shell", Args: `{"command":"echo héllo wörld ✓ 日本語"}`}}, Finish: "tool_calls"}},
		{"unknown tool", []string{"read", "shell"}, `{"mock_tool_calls":[{"name":"rm","arguments":{}}]}`, nil,
			result{Text: `mock: unknown tool "rm"; offered: read, shell`, Finish: "stop"}},
		{"no tools offered", nil, directive, nil,
			result{Text: `mock: unknown tool "shell"; offered: none`, Finish: "stop"}},
		{"bad directive", []string{"shell"}, `{"mock_tool_calls":"shell"}`, nil,
			result{Text: `mock: invalid mock_tool_calls: want an array of {"name":...,"arguments":{...}}`, Finish: "stop"}},
		{"tool results", []string{"shell"}, directive,
			&loop{call{"call_x", "shell", `{"command":"id"}`}, "uid=0(root) gid=0(root)"},
			result{Text: "Tool results: shell: uid=0(root) gid=0(root)", Finish: "stop"}},
		{"long tool result", []string{"shell"}, directive,
			&loop{call{"call_y", "shell", `{}`}, strings.Repeat("x", 2500)},
			result{Text: "Tool results: shell: " + strings.Repeat("x", 2000) + "…", Finish: "stop"}},
	}
	for _, tc := range cases {
		for _, f := range formats {
			var plain result
			for _, stream := range []bool{false, true} {
				name := tc.name + "/" + f
				if stream {
					name += "/stream"
				}
				t.Run(name, func(t *testing.T) {
					path, body := buildRequest(t, f, tc.tools, tc.user, stream, tc.hist)
					got := run(t, p, f, stream, path, body)
					for i := range got.Calls {
						if got.Calls[i].ID == "" {
							t.Fatalf("call %d without id", i)
						}
						if !json.Valid([]byte(got.Calls[i].Args)) {
							t.Fatalf("call %d args not JSON: %q", i, got.Calls[i].Args)
						}
					}
					if !stream {
						plain = got
					} else if !reflect.DeepEqual(got, plain) {
						t.Fatalf("stream %+v != plain %+v", got, plain)
					}
					noIDs := got
					noIDs.Calls = nil
					for _, c := range got.Calls {
						noIDs.Calls = append(noIDs.Calls, call{Name: c.Name, Args: c.Args})
					}
					if !reflect.DeepEqual(noIDs, tc.want) {
						t.Fatalf("got %+v\nwant %+v", noIDs, tc.want)
					}
				})
			}
		}
	}
}

func TestToolLoop(t *testing.T) {
	p := New(nil)
	for _, f := range formats {
		for _, stream := range []bool{false, true} {
			path, body := buildRequest(t, f, []string{"shell"}, directive, stream, nil)
			r1 := run(t, p, f, stream, path, body)
			if len(r1.Calls) != 1 || r1.Calls[0].Name != "shell" || r1.Finish != "tool_calls" {
				t.Fatalf("%s: turn 1 %+v", f, r1)
			}
			// Execute the "tool" and feed the result back under the returned id.
			var args struct{ Command string }
			if err := json.Unmarshal([]byte(r1.Calls[0].Args), &args); err != nil || args.Command != "id" {
				t.Fatalf("%s: args %q", f, r1.Calls[0].Args)
			}
			path, body = buildRequest(t, f, []string{"shell"}, directive, stream, &loop{r1.Calls[0], "uid=1000(agent)"})
			r2 := run(t, p, f, stream, path, body)
			if r2.Text != "Tool results: shell: uid=1000(agent)" || len(r2.Calls) != 0 || r2.Finish != "stop" {
				t.Fatalf("%s: turn 2 %+v", f, r2)
			}
		}
	}
}

func TestMultipleToolResults(t *testing.T) {
	p := New(nil)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"go"},
	{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"read","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"shell","arguments":"{}"}}]},
	{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"file body"}]},
	{"role":"tool","tool_call_id":"b","content":"ok"}]}`
	r := chatPlain(t, do(t, p.OpenAI(), "POST", "/v1/chat/completions", []byte(body)).Body.Bytes())
	if r.Text != "Tool results: read: file body\nshell: ok" {
		t.Fatalf("got %q", r.Text)
	}
	// Anthropic error results are marked.
	body = `{"model":"claude-sonnet-4","messages":[{"role":"user","content":"go"},
	{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"shell","input":{}}]},
	{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"boom"}]}]}`
	r = anPlain(t, do(t, p.Anthropic(), "POST", "/v1/messages", []byte(body)).Body.Bytes())
	if r.Text != "Tool results: shell (error): boom" {
		t.Fatalf("got %q", r.Text)
	}
}

func TestScript(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "script.json")
	script := `{"turns":[
		{"text":"Hello from the script."},
		{"text":"Running it.","tool_calls":[{"name":"shell","arguments":{"command":"ls"}}]},
		{"text":"All done."}]}`
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadScript(file)
	if err != nil {
		t.Fatal(err)
	}
	p := New(s)
	// Conversation with n assistant turns gets turn n.
	msgs := []any{map[string]any{"role": "user", "content": "hi"}}
	wants := []result{
		{Text: "Hello from the script.", Finish: "stop"},
		{Text: "Running it.", Calls: []call{{ID: "call_mock_1_0", Name: "shell", Args: `{"command":"ls"}`}}, Finish: "tool_calls"},
		{Text: "All done.", Finish: "stop"},
		{Text: "mock: next", Finish: "stop"}, // past the end: echo
	}
	for n, want := range wants {
		b, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": msgs})
		got := chatPlain(t, do(t, p.OpenAI(), "POST", "/v1/chat/completions", b).Body.Bytes())
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("turn %d: got %+v want %+v", n, got, want)
		}
		// Same conversation again: same answer.
		again := chatPlain(t, do(t, p.OpenAI(), "POST", "/v1/chat/completions", b).Body.Bytes())
		if !reflect.DeepEqual(again, got) {
			t.Fatalf("turn %d not deterministic", n)
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": got.Text},
			map[string]any{"role": "user", "content": "next"})
	}
	// Anthropic, streaming, turn 1 with text and tool call.
	body := `{"model":"claude-sonnet-4","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"go"}]}`
	r := run(t, p, "anthropic", true, "/v1/messages", []byte(body))
	if r.Text != "Running it." || len(r.Calls) != 1 || r.Calls[0].Args != `{"command":"ls"}` || r.Finish != "tool_calls" {
		t.Fatalf("anthropic script turn: %+v", r)
	}

	// Bare-array form and validation errors.
	if s, err := ParseScript([]byte(`[{"text":"a"},{"tool_calls":[{"name":"x"}]}]`)); err != nil || len(s.Turns) != 2 || string(s.Turns[1].ToolCalls[0].Arguments) != "{}" {
		t.Fatalf("bare array: %+v %v", s, err)
	}
	for _, bad := range []string{`{"turns":[{}]}`, `{"turns":[{"tool_calls":[{"arguments":{}}]}]}`,
		`{"turns":[{"tool_calls":[{"name":"x","arguments":[1]}]}]}`, `{"turn":[]}`, `nope`} {
		if _, err := ParseScript([]byte(bad)); err == nil {
			t.Errorf("script %s: want error", bad)
		}
	}
	if _, err := LoadScript(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file: want error")
	}
}

func TestDeterministic(t *testing.T) {
	p := New(nil)
	for _, f := range formats {
		for _, stream := range []bool{false, true} {
			path, body := buildRequest(t, f, []string{"shell"}, directive, stream, nil)
			h := p.OpenAI()
			if f == "anthropic" {
				h = p.Anthropic()
			}
			a := do(t, h, "POST", path, body).Body.String()
			b := do(t, New(nil).OpenAI(), "POST", path, body).Body.String()
			if f == "anthropic" {
				b = do(t, New(nil).Anthropic(), "POST", path, body).Body.String()
			}
			if a != b {
				t.Fatalf("%s stream=%v: not deterministic", f, stream)
			}
		}
	}
}

func TestEmbeddings(t *testing.T) {
	h := New(nil).OpenAI()
	get := func(body string) (vecs [][]float64) {
		w := do(t, h, "POST", "/v1/embeddings", []byte(body))
		if w.Code != 200 {
			t.Fatalf("status %d %s", w.Code, w.Body)
		}
		var resp struct {
			Object string `json:"object"`
			Data   []struct {
				Object    string          `json:"object"`
				Index     int             `json:"index"`
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		mustJSON(t, w.Body.String(), &resp)
		if resp.Object != "list" || resp.Usage.PromptTokens == 0 {
			t.Fatalf("bad response %s", w.Body)
		}
		for i, d := range resp.Data {
			if d.Index != i || d.Object != "embedding" {
				t.Fatalf("bad item %+v", d)
			}
			var v []float64
			if d.Embedding[0] == '"' {
				var s string
				mustJSON(t, string(d.Embedding), &s)
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				for j := 0; j < len(b); j += 4 {
					v = append(v, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[j:]))))
				}
			} else {
				mustJSON(t, string(d.Embedding), &v)
			}
			vecs = append(vecs, v)
		}
		return vecs
	}
	a := get(`{"model":"text-embedding-3-small","input":"hello"}`)
	b := get(`{"model":"text-embedding-3-small","input":["hello","world"]}`)
	c := get(`{"model":"text-embedding-3-small","input":["hello"],"encoding_format":"base64"}`)
	d := get(`{"model":"text-embedding-3-small","input":"hello","dimensions":40}`)
	if len(a) != 1 || len(a[0]) != 8 || len(b) != 2 || len(d[0]) != 40 {
		t.Fatalf("shapes: %d %d %d", len(a[0]), len(b), len(d[0]))
	}
	if !reflect.DeepEqual(a[0], b[0]) || !reflect.DeepEqual(a[0], c[0]) {
		t.Fatalf("not deterministic: %v %v %v", a[0], b[0], c[0])
	}
	if reflect.DeepEqual(b[0], b[1]) {
		t.Fatal("different inputs, same vector")
	}
	norm := 0.0
	for _, f := range d[0] {
		norm += f * f
	}
	if math.Abs(norm-1) > 1e-4 {
		t.Fatalf("norm %v", norm)
	}
	// Token-id input: one vector.
	if v := get(`{"model":"m","input":[1,2,3]}`); len(v) != 1 {
		t.Fatalf("token ids: %d vectors", len(v))
	}
}

func TestModels(t *testing.T) {
	p := New(nil)
	w := do(t, p.OpenAI(), "GET", "/v1/models", nil)
	var oa struct {
		Object string    `json:"object"`
		Data   []oaModel `json:"data"`
	}
	mustJSON(t, w.Body.String(), &oa)
	if w.Code != 200 || oa.Object != "list" || len(oa.Data) != 3 || oa.Data[0].Object != "model" {
		t.Fatalf("openai models: %s", w.Body)
	}
	w = do(t, p.Anthropic(), "GET", "/v1/models", nil)
	var an struct {
		Data    []anModel `json:"data"`
		HasMore bool      `json:"has_more"`
	}
	mustJSON(t, w.Body.String(), &an)
	if w.Code != 200 || len(an.Data) != 2 || an.Data[0].Type != "model" {
		t.Fatalf("anthropic models: %s", w.Body)
	}
	w = do(t, p.OpenAI(), "GET", "/v1/models/gpt-4o", nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"gpt-4o"`) {
		t.Fatalf("model get: %s", w.Body)
	}
	w = do(t, p.Anthropic(), "POST", "/v1/messages/count_tokens", []byte(`{"model":"c","messages":[{"role":"user","content":"one two three"}]}`))
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"input_tokens":3}` {
		t.Fatalf("count_tokens: %d %s", w.Code, w.Body)
	}
}

func TestErrors(t *testing.T) {
	p := New(nil)
	type oaErr struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	type anErr struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	cases := []struct {
		anthropic    bool
		method, path string
		body         string
		status       int
		errType      string
	}{
		{false, "POST", "/v1/chat/completions", `{not json`, 400, "invalid_request_error"},
		{false, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{false, "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "invalid_request_error"},
		{false, "POST", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400, "invalid_request_error"},
		{false, "POST", "/v1/responses", `{"model":"m"}`, 400, "invalid_request_error"},
		{false, "POST", "/v1/responses", `{"model":"m","input":42}`, 400, "invalid_request_error"},
		{false, "POST", "/v1/embeddings", `{"model":"m"}`, 400, "invalid_request_error"},
		{false, "POST", "/v1/nope", `{}`, 404, "invalid_request_error"},
		{false, "GET", "/v1/chat/completions", ``, 405, "invalid_request_error"},
		{true, "POST", "/v1/messages", `[`, 400, "invalid_request_error"},
		{true, "POST", "/v1/messages", `{"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{true, "POST", "/v1/messages", `{"model":"c"}`, 400, "invalid_request_error"},
		{true, "POST", "/v1/messages", `{"model":"c","messages":[{"role":"system","content":"x"}]}`, 400, "invalid_request_error"},
		{true, "POST", "/v1/messages", `{"model":"c","messages":[{"role":"user","content":5}]}`, 400, "invalid_request_error"},
		{true, "POST", "/v1/complete", `{}`, 404, "not_found_error"},
		{true, "GET", "/v1/messages", ``, 405, "invalid_request_error"},
	}
	for _, tc := range cases {
		h := p.OpenAI()
		if tc.anthropic {
			h = p.Anthropic()
		}
		w := do(t, h, tc.method, tc.path, []byte(tc.body))
		if w.Code != tc.status || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s: status %d (%s)", tc.method, tc.path, tc.body, w.Code, w.Header().Get("Content-Type"))
			continue
		}
		if tc.anthropic {
			var e anErr
			mustJSON(t, w.Body.String(), &e)
			if e.Type != "error" || e.Error == nil || e.Error.Type != tc.errType || e.Error.Message == "" {
				t.Errorf("%s %s: body %s", tc.path, tc.body, w.Body)
			}
		} else {
			var e oaErr
			mustJSON(t, w.Body.String(), &e)
			if e.Error == nil || e.Error.Type != tc.errType || e.Error.Message == "" || !strings.Contains(w.Body.String(), `"param":`) || !strings.Contains(w.Body.String(), `"code":`) {
				t.Errorf("%s %s: body %s", tc.path, tc.body, w.Body)
			}
		}
	}
}

func TestDirectiveParsing(t *testing.T) {
	cases := []struct {
		text  string
		found bool
		names []string
	}{
		{"no directive", false, nil},
		{`mentions mock_tool_calls but no JSON`, false, nil},
		{`{"other":1} then {broken then {"mock_tool_calls":[{"name":"a"}]}`, true, []string{"a"}},
		{"```json\n{\"mock_tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]}\n```", true, []string{"a", "b"}},
		{`{"wrapper":{"mock_tool_calls":[{"name":"nested"}]}}`, true, []string{"nested"}},
		{`{"mock_tool_calls":[]}`, true, nil},
	}
	for _, tc := range cases {
		calls, found, _ := findDirective(tc.text)
		var names []string
		for _, c := range calls {
			names = append(names, c.Name)
		}
		if found != tc.found || !reflect.DeepEqual(names, tc.names) {
			t.Errorf("%q: found=%v names=%v", tc.text, found, names)
		}
	}
}

// TestRealServer runs the handler behind a real HTTP server to check that
// streaming responses are flushed as SSE over the wire.
func TestRealServer(t *testing.T) {
	srv := httptest.NewServer(New(nil).Anthropic())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"claude","stream":true,"messages":[{"role":"user","content":"hi there"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := anStream(t, parseSSE(t, string(b)))
	if r.Text != "mock: hi there" {
		t.Fatalf("got %+v", r)
	}
}
