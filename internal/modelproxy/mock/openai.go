package mock

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// OpenAI returns the handler for the OpenAI wire format.
func (p *Provider) OpenAI() http.Handler {
	return routes([]route{
		{"/v1/chat/completions", http.MethodPost, p.chatCompletions},
		{"/v1/responses", http.MethodPost, p.responses},
		{"/v1/embeddings", http.MethodPost, p.embeddings},
		{"/v1/models", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			data := make([]oaModel, 0, len(p.OpenAIModels))
			for _, id := range p.OpenAIModels {
				data = append(data, oaModel{ID: id, Object: "model", OwnedBy: "ironclaw-mock"})
			}
			writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
		}},
		{"/v1/models/", http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			id := strings.TrimPrefix(normPath(r.URL.Path), "/v1/models/")
			writeJSON(w, http.StatusOK, oaModel{ID: id, Object: "model", OwnedBy: "ironclaw-mock"})
		}},
	}, func(w http.ResponseWriter, r *http.Request) {
		oaError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path), "", "method_not_allowed")
	}, func(w http.ResponseWriter, r *http.Request) {
		oaError(w, http.StatusNotFound, fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), "", "unknown_url")
	})
}

type oaModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func oaError(w http.ResponseWriter, status int, msg, param, code string) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: msg, Type: "invalid_request_error"}
	if param != "" {
		b.Param = &param
	}
	if code != "" {
		b.Code = &code
	}
	writeJSON(w, status, map[string]any{"error": b})
}

// ---- Chat Completions ----

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Tools         []chatTool    `json:"tools"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatOutMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatOutMessage `json:"message"`
	Logprobs     *struct{}      `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   oaUsage      `json:"usage"`
}

type chatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *oaUsage          `json:"usage,omitempty"`
}

func (req *chatRequest) conversation() *conversation {
	c := &conversation{}
	for _, t := range req.Tools {
		if t.Function.Name != "" {
			c.tools = append(c.tools, t.Function.Name)
		}
	}
	for _, m := range req.Messages {
		text, has := textOf(m.Content)
		msg := message{text: text, hasText: has}
		switch m.Role {
		case "system", "developer":
			msg.role = "system"
		case "assistant":
			msg.role = "assistant"
			for _, tc := range m.ToolCalls {
				msg.calls = append(msg.calls, callRef{id: tc.ID, name: tc.Function.Name})
			}
		case "tool", "function":
			msg.role = "tool"
			msg.toolCallID = m.ToolCallID
			if m.Role == "function" {
				msg.toolName = m.Name
			}
		default:
			msg.role = "user"
		}
		c.msgs = append(c.msgs, msg)
	}
	return c
}

// decodeOpenAI reads and parses an OpenAI request body into req and checks
// that *model (a field of req) was given; on failure it has answered with
// OpenAI's error shape and returns false.
func decodeOpenAI(w http.ResponseWriter, r *http.Request, req any, model *string) ([]byte, bool) {
	body, err := readBody(w, r)
	if err != nil {
		oaError(w, http.StatusBadRequest, "could not read request body: "+err.Error(), "", "")
		return nil, false
	}
	if err := json.Unmarshal(body, req); err != nil {
		oaError(w, http.StatusBadRequest, "We could not parse the JSON body of your request: "+err.Error(), "", "invalid_json")
		return nil, false
	}
	if *model == "" {
		oaError(w, http.StatusBadRequest, "you must provide a model parameter", "model", "")
		return nil, false
	}
	return body, true
}

func (p *Provider) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	body, ok := decodeOpenAI(w, r, &req, &req.Model)
	if !ok {
		return
	}
	if len(req.Messages) == 0 {
		oaError(w, http.StatusBadRequest, "'messages' is required and must be a non-empty array", "messages", "")
		return
	}
	conv := req.conversation()
	rep := p.decide(conv)
	id := "chatcmpl-mock-" + hashID(body)
	usage := oaUsage{PromptTokens: conv.promptTokens(), CompletionTokens: rep.completionTokens()}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	finish := "stop"
	if len(rep.calls) > 0 {
		finish = "tool_calls"
	}
	callID := func(i int) string { return fmt.Sprintf("call_mock_%d_%d", rep.turn, i) }

	if !req.Stream {
		msg := chatOutMessage{Role: "assistant"}
		if rep.text != "" || len(rep.calls) == 0 {
			t := rep.text
			msg.Content = &t
		}
		for i, c := range rep.calls {
			tc := chatToolCall{ID: callID(i), Type: "function"}
			tc.Function.Name = c.Name
			tc.Function.Arguments = string(c.Arguments)
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
		writeJSON(w, http.StatusOK, chatCompletion{
			ID: id, Object: "chat.completion", Model: req.Model,
			Choices: []chatChoice{{Message: msg, FinishReason: finish}},
			Usage:   usage,
		})
		return
	}

	s := newSSE(w)
	chunk := func(d chatDelta, fin *string) chatChunk {
		return chatChunk{ID: id, Object: "chat.completion.chunk", Model: req.Model,
			Choices: []chatChunkChoice{{Delta: d, FinishReason: fin}}}
	}
	empty := ""
	s.event("", chunk(chatDelta{Role: "assistant", Content: &empty}, nil))
	for _, piece := range splitWords(rep.text) {
		s.event("", chunk(chatDelta{Content: &piece}, nil))
	}
	for i, c := range rep.calls {
		idx := i
		head := chatToolCall{Index: &idx, ID: callID(i), Type: "function"}
		head.Function.Name = c.Name
		s.event("", chunk(chatDelta{ToolCalls: []chatToolCall{head}}, nil))
		for _, piece := range splitRunes(string(c.Arguments), 8) {
			part := chatToolCall{Index: &idx}
			part.Function.Arguments = piece
			s.event("", chunk(chatDelta{ToolCalls: []chatToolCall{part}}, nil))
		}
	}
	s.event("", chunk(chatDelta{}, &finish))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		s.event("", chatChunk{ID: id, Object: "chat.completion.chunk", Model: req.Model,
			Choices: []chatChunkChoice{}, Usage: &usage})
	}
	s.raw("", "[DONE]")
}

// ---- Responses API ----

type responsesRequest struct {
	Model        string          `json:"model"`
	Input        json.RawMessage `json:"input"`
	Instructions json.RawMessage `json:"instructions"`
	Tools        []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type respInputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type respContent struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type respItem struct {
	Type      string        `json:"type"`
	ID        string        `json:"id"`
	Status    string        `json:"status"`
	Role      string        `json:"role,omitempty"`
	Content   []respContent `json:"content,omitempty"`
	CallID    string        `json:"call_id,omitempty"`
	Name      string        `json:"name,omitempty"`
	Arguments *string       `json:"arguments,omitempty"`
}

type respUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

type respObject struct {
	ID                string     `json:"id"`
	Object            string     `json:"object"`
	CreatedAt         int64      `json:"created_at"`
	Status            string     `json:"status"`
	Error             *struct{}  `json:"error"`
	IncompleteDetails *struct{}  `json:"incomplete_details"`
	Model             string     `json:"model"`
	Output            []respItem `json:"output"`
	ParallelToolCalls bool       `json:"parallel_tool_calls"`
	ToolChoice        string     `json:"tool_choice"`
	Tools             []any      `json:"tools"`
	Usage             *respUsage `json:"usage"`
}

func (req *responsesRequest) conversation() (*conversation, error) {
	c := &conversation{}
	for _, t := range req.Tools {
		if t.Name != "" {
			c.tools = append(c.tools, t.Name)
		}
	}
	if s, ok := textOf(req.Instructions); ok {
		c.msgs = append(c.msgs, message{role: "system", text: s, hasText: true})
	}
	in := bytes.TrimSpace(req.Input)
	if len(in) > 0 && in[0] == '"' {
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, err
		}
		c.msgs = append(c.msgs, message{role: "user", text: s, hasText: true})
		return c, nil
	}
	var items []respInputItem
	if err := json.Unmarshal(in, &items); err != nil {
		return nil, fmt.Errorf("'input' must be a string or an array of items: %v", err)
	}
	for _, it := range items {
		switch it.Type {
		case "", "message":
			text, has := textOf(it.Content)
			role := "user"
			switch it.Role {
			case "assistant":
				role = "assistant"
			case "system", "developer":
				role = "system"
			}
			c.msgs = append(c.msgs, message{role: role, text: text, hasText: has})
		case "function_call":
			c.msgs = append(c.msgs, message{role: "assistant", calls: []callRef{{id: it.CallID, name: it.Name}}, text: it.Arguments})
		case "function_call_output":
			text, _ := textOf(it.Output)
			c.msgs = append(c.msgs, message{role: "tool", text: text, toolCallID: it.CallID})
		case "reasoning":
			c.msgs = append(c.msgs, message{role: "assistant"})
		default:
			// item_reference, built-in tool calls, ...: ignored
		}
	}
	return c, nil
}

func (p *Provider) responses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	body, ok := decodeOpenAI(w, r, &req, &req.Model)
	if !ok {
		return
	}
	if in := bytes.TrimSpace(req.Input); len(in) == 0 || string(in) == "null" {
		oaError(w, http.StatusBadRequest, "Missing required parameter: 'input'.", "input", "missing_required_parameter")
		return
	}
	conv, err := req.conversation()
	if err != nil {
		oaError(w, http.StatusBadRequest, err.Error(), "input", "")
		return
	}
	rep := p.decide(conv)
	h := hashID(body)
	usage := &respUsage{
		InputTokens:         conv.promptTokens(),
		InputTokensDetails:  map[string]int{"cached_tokens": 0},
		OutputTokens:        rep.completionTokens(),
		OutputTokensDetails: map[string]int{"reasoning_tokens": 0},
	}
	usage.TotalTokens = usage.InputTokens + usage.OutputTokens

	// Final output items.
	var items []respItem
	if rep.text != "" || len(rep.calls) == 0 {
		items = append(items, respItem{Type: "message", ID: "msg_mock_" + h, Status: "completed", Role: "assistant",
			Content: []respContent{{Type: "output_text", Text: rep.text, Annotations: []any{}}}})
	}
	for i, c := range rep.calls {
		args := string(c.Arguments)
		items = append(items, respItem{Type: "function_call", ID: fmt.Sprintf("fc_mock_%s_%d", h, i), Status: "completed",
			CallID: fmt.Sprintf("call_mock_%d_%d", rep.turn, i), Name: c.Name, Arguments: &args})
	}
	resp := respObject{ID: "resp_mock_" + h, Object: "response", Status: "completed", Model: req.Model,
		Output: items, ParallelToolCalls: true, ToolChoice: "auto", Tools: []any{}, Usage: usage}

	if !req.Stream {
		writeJSON(w, http.StatusOK, resp)
		return
	}

	s := newSSE(w)
	seq := 0
	emit := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		s.event(typ, fields)
	}
	pending := resp
	pending.Status = "in_progress"
	pending.Output = []respItem{}
	pending.Usage = nil
	emit("response.created", map[string]any{"response": pending})
	emit("response.in_progress", map[string]any{"response": pending})
	for oi, it := range items {
		switch it.Type {
		case "message":
			added := it
			added.Status = "in_progress"
			added.Content = []respContent{}
			emit("response.output_item.added", map[string]any{"output_index": oi, "item": added})
			emit("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0,
				"part": respContent{Type: "output_text", Annotations: []any{}}})
			for _, piece := range splitWords(rep.text) {
				emit("response.output_text.delta", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0,
					"delta": piece, "logprobs": []any{}})
			}
			emit("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0,
				"text": rep.text, "logprobs": []any{}})
			emit("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0,
				"part": it.Content[0]})
		case "function_call":
			added := it
			added.Status = "in_progress"
			empty := ""
			added.Arguments = &empty
			emit("response.output_item.added", map[string]any{"output_index": oi, "item": added})
			for _, piece := range splitRunes(*it.Arguments, 8) {
				emit("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": oi, "delta": piece})
			}
			emit("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": oi,
				"name": it.Name, "arguments": *it.Arguments})
		}
		emit("response.output_item.done", map[string]any{"output_index": oi, "item": it})
	}
	emit("response.completed", map[string]any{"response": resp})
}

// ---- Embeddings ----

func (p *Provider) embeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     int             `json:"dimensions"`
	}
	_, ok := decodeOpenAI(w, r, &req, &req.Model)
	if !ok {
		return
	}
	// Inputs: a string, an array of strings, an array of token ids, or an
	// array of token-id arrays. Each input is hashed as its JSON text.
	var inputs []json.RawMessage
	in := bytes.TrimSpace(req.Input)
	switch {
	case len(in) == 0 || string(in) == "null":
		oaError(w, http.StatusBadRequest, "Missing required parameter: 'input'.", "input", "missing_required_parameter")
		return
	case in[0] == '[':
		var arr []json.RawMessage
		if err := json.Unmarshal(in, &arr); err != nil {
			oaError(w, http.StatusBadRequest, "invalid 'input': "+err.Error(), "input", "")
			return
		}
		if len(arr) > 0 && bytes.TrimSpace(arr[0])[0] != '"' && bytes.TrimSpace(arr[0])[0] != '[' {
			inputs = []json.RawMessage{in} // a single list of token ids
		} else {
			inputs = arr
		}
	default:
		inputs = []json.RawMessage{in}
	}
	if len(inputs) == 0 {
		oaError(w, http.StatusBadRequest, "'input' must not be empty", "input", "")
		return
	}
	dims := req.Dimensions
	if dims <= 0 {
		dims = p.EmbeddingDims
	}
	if dims <= 0 {
		dims = 8
	}
	if dims > 4096 {
		oaError(w, http.StatusBadRequest, "'dimensions' must be at most 4096", "dimensions", "")
		return
	}
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]item, 0, len(inputs))
	tokens := 0
	for i, raw := range inputs {
		key := raw
		if s, ok := textOf(raw); ok && bytes.TrimSpace(raw)[0] == '"' {
			key = json.RawMessage(s)
			tokens += countWords(s)
		} else {
			tokens++
		}
		vec := Embedding(string(key), dims)
		var emb any = vec
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(float32(f)))
			}
			emb = base64.StdEncoding.EncodeToString(buf)
		}
		data = append(data, item{Object: "embedding", Index: i, Embedding: emb})
	}
	if tokens == 0 {
		tokens = 1
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": req.Model,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// Embedding returns the deterministic unit-length mock vector for text.
func Embedding(text string, dims int) []float64 {
	vec := make([]float64, dims)
	var sum [32]byte
	norm := 0.0
	for i := 0; i < dims; i++ {
		if i%16 == 0 {
			sum = sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s", i/16, text)))
		}
		v := binary.BigEndian.Uint16(sum[(i%16)*2:])
		f := float64(v)/32767.5 - 1
		vec[i] = f
		norm += f * f
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		norm = 1
	}
	for i := range vec {
		// round to float32 precision so JSON and base64 agree
		vec[i] = float64(float32(vec[i] / norm))
	}
	return vec
}
