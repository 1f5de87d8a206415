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
// in the final chunk; the Responses API in response.completed's response;
// Anthropic in message_start's message and, cumulatively, message_delta.
// Per field the largest value seen wins, which is right for all three.
type sseUsage struct {
	line     []byte
	skipping bool
	in, out  int64
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
			var u usage
			if dec.Decode(&u) != nil {
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
