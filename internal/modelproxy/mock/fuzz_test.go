package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzConversation is the mock provider answering a request a sandbox
// sent through the model proxy (the mock runs in the daemon, and with no
// provider key it is what every sandbox talks to). For the routes that
// decode a conversation, in each wire format, streamed or not, whatever
// the body: no panic, a 2xx or 4xx status (bad input is the client's
// fault), and a well-formed answer: one JSON value, or server-sent events
// whose every data line is JSON (or OpenAI's "[DONE]").
//
// Embeddings are left out: their cost grows with inputs times
// "dimensions" (up to 4096), so a few kilobytes of request make hundreds
// of megabytes of answer; see the report for issue 12.
func FuzzConversation(f *testing.F) {
	for _, s := range []struct {
		route uint8
		body  string
	}{
		{0, `{"model":"mock-gpt","messages":[{"role":"user","content":"hello"}]}`},
		{0, `{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{0, `{"model":"m","tools":[{"type":"function","function":{"name":"shell","parameters":{}}}],"messages":[{"role":"user","content":"{\"mock_tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"id\"}}]}"}]}`},
		{0, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"uid=65532"}]}`},
		{0, `{"model":"m","messages":[{"role":"user","content":"{\"mock_tool_calls\":[{\"name\":\"nope\",\"arguments\":1}]}"}]}`},
		{0, `{"model":"m","messages":[]}`},
		{1, `{"model":"mock-gpt","input":"hello"}`},
		{1, `{"model":"mock-gpt","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`},
		{1, `{"model":"m","tools":[{"type":"function","name":"shell"}],"input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`},
		{2, `{"model":"mock-claude","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`},
		{2, `{"model":"mock-claude","max_tokens":64,"stream":true,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
		{2, `{"model":"m","max_tokens":1,"tools":[{"name":"shell","input_schema":{}}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"ok"}],"is_error":true}]}]}`},
		{3, `{"model":"mock-claude","messages":[{"role":"user","content":"count me"}]}`},
		{0, `not json`}, {1, ``}, {2, `[]`}, {3, `{"messages":null}`},
	} {
		f.Add(s.route, []byte(s.body))
	}
	p := New(nil)
	routes := []struct {
		h    http.Handler
		path string
	}{
		{p.OpenAI(), "/v1/chat/completions"},
		{p.OpenAI(), "/v1/responses"},
		{p.Anthropic(), "/v1/messages"},
		{p.Anthropic(), "/v1/messages/count_tokens"},
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := routes[int(route)%len(routes)]
		rec := httptest.NewRecorder()
		rt.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, rt.path, bytes.NewReader(body)))
		if rec.Code < 200 || rec.Code >= 300 && rec.Code < 400 || rec.Code >= 500 {
			t.Fatalf("POST %s %q: status %d: %s", rt.path, body, rec.Code, rec.Body.Bytes())
		}
		out := rec.Body.Bytes()
		switch ct := rec.Header().Get("Content-Type"); {
		case strings.HasPrefix(ct, "application/json"):
			if !json.Valid(out) {
				t.Fatalf("POST %s %q: %d with a JSON body that is not: %q", rt.path, body, rec.Code, out)
			}
		case strings.HasPrefix(ct, "text/event-stream") && rec.Code == http.StatusOK:
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, len(out)+1)
			events := 0
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				events++
				if data != "[DONE]" && !json.Valid([]byte(data)) {
					t.Fatalf("POST %s %q: an event's data is not JSON: %q", rt.path, body, data)
				}
			}
			if events == 0 {
				t.Fatalf("POST %s %q: a stream without events", rt.path, body)
			}
		default:
			t.Fatalf("POST %s %q: %d with Content-Type %q", rt.path, body, rec.Code, ct)
		}
	})
}
