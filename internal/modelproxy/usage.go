package modelproxy

import (
	"bytes"
	"encoding/json"
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
	if !ok || !mayHoldUsage(data) {
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

// jsonUsage reads the top-level "usage" member of a JSON response as its
// bytes pass, so a large response (embeddings) is neither buffered nor left
// uncounted: a byte scanner follows nesting and strings, keeps each
// top-level member name (up to maxUsageKey bytes) and, once a name reads
// "usage", that member's value (up to maxUsageValue bytes), which it
// decodes when the member ends. The first "usage" member counts; a
// response that is not an object, or whose usage is null, malformed or
// longer than the bound, has none. It runs in the relaying goroutine and
// holds nothing beyond those two bounded buffers.
type jsonUsage struct {
	started bool // the top-level '{' was seen
	done    bool // usage found, or known to be absent
	depth   int  // nesting outside strings; 1 inside the top-level object
	inStr   bool
	esc     bool // the previous string byte was a backslash
	inKey   bool // the current string is a top-level member name
	inValue bool // past a top-level member's ':', before its ',' or '}'
	key     []byte
	keyLong bool
	take    bool // the current member is "usage": its value is kept in val
	val     []byte
	u       *usage
}

const (
	maxUsageKey   = 64       // "usage" spelled with \u escapes fits
	maxUsageValue = 64 << 10 // a usage object is a few hundred bytes
)

func newJSONUsage() *jsonUsage { return &jsonUsage{} }

func (j *jsonUsage) Write(p []byte) {
	for i := 0; i < len(p) && !j.done; i++ {
		c := p[i]
		if j.inStr {
			switch {
			case j.esc:
				j.esc = false
			case c == '\\':
				j.esc = true
			case c == '"':
				j.inStr = false
				if j.inKey {
					j.inKey = false
					continue
				}
			}
			if j.inKey {
				if len(j.key) < maxUsageKey {
					j.key = append(j.key, c)
				} else {
					j.keyLong = true
				}
			} else if j.take {
				j.keep(c)
			}
			continue
		}
		if !j.started {
			switch c {
			case ' ', '\t', '\n', '\r':
			case '{':
				j.started, j.depth = true, 1
			default:
				j.done = true // not an object
			}
			continue
		}
		if j.depth == 1 {
			switch c {
			case '"':
				j.inStr = true
				if !j.inValue {
					j.inKey, j.key, j.keyLong = true, j.key[:0], false
					continue
				}
			case ':':
				if !j.inValue {
					j.inValue, j.take, j.val = true, j.isUsage(), j.val[:0]
					continue
				}
			case ',', '}':
				if j.take {
					j.finish()
				}
				if c == '}' {
					j.done = true // the object ended without usage
				}
				j.inValue = false
				continue
			}
		}
		switch c {
		case '"':
			j.inStr = true
		case '{', '[':
			j.depth++
		case '}', ']':
			j.depth--
		}
		if j.take {
			j.keep(c)
			if j.take && j.depth == 1 && (c == '}' || c == ']') {
				j.finish() // the value is whole: what follows cannot change it
			}
		}
	}
}

// isUsage reports whether the member name just read is "usage".
func (j *jsonUsage) isUsage() bool {
	if j.keyLong {
		return false
	}
	if bytes.IndexByte(j.key, '\\') < 0 {
		return string(j.key) == "usage"
	}
	var k string
	return json.Unmarshal(append(append([]byte{'"'}, j.key...), '"'), &k) == nil && k == "usage"
}

func (j *jsonUsage) keep(c byte) {
	if len(j.val) >= maxUsageValue {
		j.done, j.take = true, false // longer than any usage: none
		return
	}
	j.val = append(j.val, c)
}

// finish decodes the usage member's value; the scan is over either way.
func (j *jsonUsage) finish() {
	j.done, j.take = true, false
	v := bytes.TrimSpace(j.val)
	// null (a Responses request in the background) is no usage.
	if string(v) == "null" {
		return
	}
	var u usage
	if json.Unmarshal(v, &u) == nil {
		j.u = &u
	}
}

func (j *jsonUsage) Usage() (int64, int64) { return j.u.split() }

func (j *jsonUsage) Final() bool { return j.u != nil }

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
	if !ok || !mayHoldUsage(data) {
		return false
	}
	var ev struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usage            `json:"usage"`
	}
	return json.Unmarshal(bytes.TrimSpace(data), &ev) == nil && ev.Usage != nil && len(ev.Choices) == 0
}

// mayHoldUsage reports whether an event's data may carry a usage object:
// it names "usage" somewhere other than as `"usage":null`. An OpenAI chat
// stream asked for usage sends "usage":null in every chunk but the last;
// those chunks are not decoded at all. (Inside a JSON string the quotes
// are escaped, so `"usage"` there never matches.)
func mayHoldUsage(data []byte) bool {
	key := []byte(`"usage"`)
	for {
		i := bytes.Index(data, key)
		if i < 0 {
			return false
		}
		data = data[i+len(key):]
		rest := bytes.TrimLeft(data, " \t")
		if len(rest) == 0 || rest[0] != ':' {
			return true
		}
		rest = bytes.TrimLeft(rest[1:], " \t")
		if !bytes.HasPrefix(rest, []byte("null")) {
			return true
		}
		data = rest[len("null"):]
	}
}
