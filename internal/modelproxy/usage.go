package modelproxy

import (
	"bytes"
	"encoding/json"
	"io"
)

// usageSink watches the relayed response bytes (as they pass, without
// holding the response back) and reports the provider's token usage.
type usageSink interface {
	Write(p []byte)
	Usage() (input, output int64)
	// Final reports whether the response carried its final usage (call
	// after Usage).
	Final() bool
}

// usage is the union of the providers' usage objects.
type usage struct {
	PromptTokens             int64 `json:"prompt_tokens"`
	CompletionTokens         int64 `json:"completion_tokens"`
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

func (u *usage) split() (in, out int64) {
	if u == nil {
		return 0, 0
	}
	in = max(u.PromptTokens, u.InputTokens) + u.CacheCreationInputTokens + u.CacheReadInputTokens
	out = max(u.CompletionTokens, u.OutputTokens)
	return in, out
}

// maxSSELine bounds the SSE line kept for parsing; longer lines (huge
// content deltas) are relayed but not parsed.
const maxSSELine = 1 << 20

// sseUsage parses "data:" lines of an event stream. OpenAI chat sends usage
// in the final chunk; the Responses API in response.completed's (or
// .incomplete's, .failed's) response; Anthropic in message_start's message
// and, cumulatively, message_delta. Per field the largest value seen wins,
// which is right for all three. The usage is final once a top-level usage
// (OpenAI chat's last chunk, Anthropic's message_delta) or a response's
// usage (Responses) was seen; message_start's is only the start.
type sseUsage struct {
	line     []byte
	skipping bool
	in, out  int64
	final    bool
}

func (s *sseUsage) Write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if !s.skipping {
			if len(s.line)+len(part) > maxSSELine {
				s.skipping, s.line = true, s.line[:0]
			} else {
				s.line = append(s.line, part...)
			}
		}
		if i < 0 {
			return
		}
		if !s.skipping {
			s.parse(bytes.TrimSuffix(s.line, []byte("\r")))
		}
		s.line, s.skipping = s.line[:0], false
		p = p[i+1:]
	}
}

func (s *sseUsage) parse(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var ev struct {
		Usage   *usage `json:"usage"`
		Message *struct {
			Usage *usage `json:"usage"`
		} `json:"message"`
		Response *struct {
			Usage *usage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &ev) != nil {
		return
	}
	for _, u := range []*usage{ev.Usage, msgUsage(ev.Message), respUsage(ev.Response)} {
		in, out := u.split()
		s.in, s.out = max(s.in, in), max(s.out, out)
	}
	if ev.Usage != nil || respUsage(ev.Response) != nil {
		s.final = true
	}
}

func msgUsage(m *struct {
	Usage *usage `json:"usage"`
}) *usage {
	if m == nil {
		return nil
	}
	return m.Usage
}

var respUsage = msgUsage

func (s *sseUsage) Usage() (int64, int64) { return s.in, s.out }

func (s *sseUsage) Final() bool { return s.final }

// jsonUsage reads the top-level "usage" member of a JSON response with a
// streaming decoder fed through a pipe, so a large response (embeddings) is
// neither buffered nor left uncounted.
type jsonUsage struct {
	pw   *io.PipeWriter
	done chan struct{}
	dead bool
	u    *usage
}

func newJSONUsage() *jsonUsage {
	pr, pw := io.Pipe()
	j := &jsonUsage{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		j.u = topLevelUsage(json.NewDecoder(pr))
		// Unblock and fail further writes: the rest is not needed.
		pr.CloseWithError(io.ErrClosedPipe)
	}()
	return j
}

func (j *jsonUsage) Write(p []byte) {
	if j.dead {
		return
	}
	if _, err := j.pw.Write(p); err != nil {
		j.dead = true
	}
}

func (j *jsonUsage) Usage() (int64, int64) {
	j.pw.Close()
	<-j.done
	return j.u.split()
}

func (j *jsonUsage) Final() bool { return j.u != nil }

// topLevelUsage walks one JSON object and decodes its "usage" member.
func topLevelUsage(dec *json.Decoder) *usage {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		if k == "usage" {
			// null (a Responses request in the background) is no usage.
			var raw json.RawMessage
			if dec.Decode(&raw) != nil || string(raw) == "null" {
				return nil
			}
			var u usage
			if json.Unmarshal(raw, &u) != nil {
				return nil
			}
			return &u
		}
		if skipValue(dec) != nil {
			return nil
		}
	}
	return nil
}

// skipValue consumes one value token by token, holding no more of it than
// the current token.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// usageStripper drops, from an OpenAI chat stream, the usage chunk the
// proxy asked for on a client's behalf ({"choices":[],"usage":{...}}, and
// the blank line ending its event), so a client that did not ask for it
// sees the stream it asked for. It passes whole lines and holds only a
// partial last line until its end arrives (a line past maxSSELine is
// passed on unfiltered): events end with a blank line, so no complete
// event is ever held back.
type usageStripper struct {
	held      []byte
	passing   bool // the held line is too long to filter: pass it through
	dropBlank bool // the next line, if blank, ends a dropped event
	out       []byte
}

// filter returns the bytes of p to relay now.
func (u *usageStripper) filter(p []byte) []byte {
	u.out = u.out[:0]
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if u.passing || len(u.held)+len(p) > maxSSELine {
				u.out = append(append(u.out, u.held...), p...)
				u.held, u.passing = u.held[:0], true
			} else {
				u.held = append(u.held, p...)
			}
			return u.out
		}
		line := p[:i+1]
		p = p[i+1:]
		if u.passing {
			u.out = append(u.out, line...)
			u.passing = false
			continue
		}
		full := line
		if len(u.held) > 0 {
			full = append(u.held, line...)
		}
		u.held = u.held[:0]
		if u.dropBlank {
			u.dropBlank = false
			if len(bytes.TrimRight(full, "\r\n")) == 0 {
				continue
			}
		}
		if isUsageChunk(full) {
			u.dropBlank = true
			continue
		}
		u.out = append(u.out, full...)
	}
	return u.out
}

// rest returns what is held at the end of the stream.
func (u *usageStripper) rest() []byte {
	out := u.held
	u.held = nil
	return out
}

// isUsageChunk reports whether line is the data line of a usage-only chat
// chunk.
func isUsageChunk(line []byte) bool {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return false
	}
	var ev struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usage            `json:"usage"`
	}
	return json.Unmarshal(bytes.TrimSpace(data), &ev) == nil && ev.Usage != nil && len(ev.Choices) == 0
}
