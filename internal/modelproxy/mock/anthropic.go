package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Anthropic returns the handler for the Anthropic Messages wire format.
func (p *Provider) Anthropic() http.Handler {
	return routes([]route{
		{"/v1/messages", http.MethodPost, func(w http.ResponseWriter, r *http.Request) { p.messages(w, r, false) }},
		{"/v1/messages/count_tokens", http.MethodPost, func(w http.ResponseWriter, r *http.Request) { p.messages(w, r, true) }},
		{"/v1/models", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			data := make([]anModel, 0, len(p.AnthropicModels))
			for _, id := range p.AnthropicModels {
				data = append(data, newAnModel(id))
			}
			out := map[string]any{"data": data, "has_more": false, "first_id": nil, "last_id": nil}
			if len(data) > 0 {
				out["first_id"] = data[0].ID
				out["last_id"] = data[len(data)-1].ID
			}
			writeJSON(w, http.StatusOK, out)
		}},
		{"/v1/models/", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, newAnModel(strings.TrimPrefix(normPath(r.URL.Path), "/v1/models/")))
		}},
	}, func(w http.ResponseWriter, r *http.Request) {
		anError(w, http.StatusMethodNotAllowed, "invalid_request_error", fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
	}, func(w http.ResponseWriter, r *http.Request) {
		anError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path))
	})
}

type anModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func newAnModel(id string) anModel {
	return anModel{Type: "model", ID: id, DisplayName: "Mock " + id, CreatedAt: "1970-01-01T00:00:00Z"}
}

func anError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": msg},
	})
}

type anRequest struct {
	Model    string          `json:"model"`
	Messages []anMessage     `json:"messages"`
	System   json.RawMessage `json:"system"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func (req *anRequest) conversation() (*conversation, error) {
	c := &conversation{}
	for _, t := range req.Tools {
		if t.Name != "" {
			c.tools = append(c.tools, t.Name)
		}
	}
	if s, ok := textOf(req.System); ok {
		c.msgs = append(c.msgs, message{role: "system", text: s, hasText: true})
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		content := bytes.TrimSpace(m.Content)
		if len(content) > 0 && content[0] == '"' {
			var s string
			if err := json.Unmarshal(content, &s); err != nil {
				return nil, fmt.Errorf("messages.%d.content: %v", i, err)
			}
			c.msgs = append(c.msgs, message{role: m.Role, text: s, hasText: true})
			continue
		}
		var blocks []anBlock
		if err := json.Unmarshal(content, &blocks); err != nil {
			return nil, fmt.Errorf("messages.%d.content: must be a string or an array of content blocks", i)
		}
		msg := message{role: m.Role}
		var texts []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
				msg.hasText = true
			case "tool_use":
				msg.calls = append(msg.calls, callRef{id: b.ID, name: b.Name})
			case "tool_result":
				text, _ := textOf(b.Content)
				c.msgs = append(c.msgs, message{role: "tool", text: text, toolCallID: b.ToolUseID, isError: b.IsError})
			}
		}
		msg.text = strings.Join(texts, "\n")
		// A user message with tool results and no text adds no user entry,
		// so the conversation "ends with tool results".
		if m.Role == "assistant" || msg.hasText || !hasToolResult(blocks) {
			c.msgs = append(c.msgs, msg)
		}
	}
	return c, nil
}

func hasToolResult(blocks []anBlock) bool {
	for _, b := range blocks {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

type anContent struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type anUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type anMessageOut struct {
	ID           string      `json:"id"`
	Type         string      `json:"type"`
	Role         string      `json:"role"`
	Model        string      `json:"model"`
	Content      []anContent `json:"content"`
	StopReason   *string     `json:"stop_reason"`
	StopSequence *string     `json:"stop_sequence"`
	Usage        anUsage     `json:"usage"`
}

func (p *Provider) messages(w http.ResponseWriter, r *http.Request, countOnly bool) {
	body, err := readBody(w, r)
	if err != nil {
		anError(w, http.StatusBadRequest, "invalid_request_error", "could not read request body: "+err.Error())
		return
	}
	var req anRequest
	if err := json.Unmarshal(body, &req); err != nil {
		anError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	if req.Model == "" {
		anError(w, http.StatusBadRequest, "invalid_request_error", "model: Field required")
		return
	}
	if len(req.Messages) == 0 {
		anError(w, http.StatusBadRequest, "invalid_request_error", "messages: Field required (at least one message)")
		return
	}
	conv, err := req.conversation()
	if err != nil {
		anError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if countOnly {
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": conv.promptTokens()})
		return
	}
	rep := p.decide(conv)
	usage := anUsage{InputTokens: conv.promptTokens(), OutputTokens: rep.completionTokens()}
	stop := "end_turn"
	if len(rep.calls) > 0 {
		stop = "tool_use"
	}
	var blocks []anContent
	if rep.text != "" || len(rep.calls) == 0 {
		t := rep.text
		blocks = append(blocks, anContent{Type: "text", Text: &t})
	}
	for i, c := range rep.calls {
		blocks = append(blocks, anContent{Type: "tool_use", ID: fmt.Sprintf("toolu_mock_%d_%d", rep.turn, i),
			Name: c.Name, Input: c.Arguments})
	}
	msg := anMessageOut{ID: "msg_mock_" + hashID(body), Type: "message", Role: "assistant", Model: req.Model,
		Content: blocks, StopReason: &stop, Usage: usage}

	if !req.Stream {
		writeJSON(w, http.StatusOK, msg)
		return
	}

	s := newSSE(w)
	start := msg
	start.Content = []anContent{}
	start.StopReason = nil
	start.Usage = anUsage{InputTokens: usage.InputTokens, OutputTokens: 1}
	s.event("message_start", map[string]any{"type": "message_start", "message": start})
	s.event("ping", map[string]any{"type": "ping"})
	for i, b := range blocks {
		switch b.Type {
		case "text":
			empty := ""
			s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": anContent{Type: "text", Text: &empty}})
			for _, piece := range splitWords(*b.Text) {
				s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]string{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": anContent{Type: "tool_use", ID: b.ID, Name: b.Name, Input: json.RawMessage("{}")}})
			for _, piece := range splitRunes(string(b.Input), 8) {
				s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]string{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": usage.OutputTokens}})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}
