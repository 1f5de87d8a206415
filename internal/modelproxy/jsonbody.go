package modelproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The proxy reads a request body once, strictly, and forwards bytes that
// every JSON parser reads the same way. Parsers disagree on exactly the
// inputs refused here: Go's encoding/json matches member names without
// regard to case and keeps the last of duplicates, others keep the first
// or are case-sensitive, so {"model":"allowed","MODEL":"other"} would pass
// the allowlist here and reach the provider as another model. A body is
// accepted only if it is I-JSON (RFC 7493: UTF-8, no lone surrogates,
// unique member names), with member names unique even under Unicode case
// folding, in every object at any depth, nested at most maxJSONDepth deep,
// one top-level object and nothing after it.

// maxJSONDepth bounds nesting (tool schemas nest a few levels; a hostile
// body cannot make the scanner recurse without bound).
const maxJSONDepth = 256

// bodyError is a refused body: reason is the audit record's refusal
// reason, msg what the client is told.
type bodyError struct{ reason, msg string }

func (e *bodyError) Error() string { return e.msg }

func invalidJSON(msg string, at int) error {
	return &bodyError{"invalid_json", "request body is not strict JSON: " + msg + " at byte " + strconv.Itoa(at)}
}

// jsonBody is a parsed request body: the top-level object's members with
// the byte spans of their values.
type jsonBody struct {
	raw     []byte
	open    int // index of the top-level '{'
	members []member
}

type member struct {
	key          string // decoded
	vStart, vEnd int    // the value's bytes: raw[vStart:vEnd]
}

// parseBody checks b as described above and returns its top-level members.
func parseBody(b []byte) (*jsonBody, error) {
	s := &scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '{' {
		return nil, &bodyError{"invalid_json", "request body must be a JSON object"}
	}
	open := s.i
	s.top = true
	if err := s.value(0); err != nil {
		return nil, err
	}
	s.ws()
	if s.i != len(b) {
		return nil, invalidJSON("data after the top-level object", s.i)
	}
	return &jsonBody{raw: b, open: open, members: s.members}, nil
}

// lookup returns the value of the member spelled exactly name. A member
// whose name equals name only under case folding is refused: the proxy
// and the provider could read different fields.
func (j *jsonBody) lookup(name string) ([]byte, bool, error) {
	for _, m := range j.members {
		if m.key == name {
			return j.raw[m.vStart:m.vEnd], true, nil
		}
		if strings.EqualFold(m.key, name) {
			return nil, false, &bodyError{"case_variant_key", "request body member " + strconv.Quote(m.key) + " must be spelled " + strconv.Quote(name)}
		}
	}
	return nil, false, nil
}

// span returns the value span of the member spelled exactly name.
func (j *jsonBody) span(name string) (int, int, bool) {
	for _, m := range j.members {
		if m.key == name {
			return m.vStart, m.vEnd, true
		}
	}
	return 0, 0, false
}

type scanner struct {
	b       []byte
	i       int
	top     bool // the next object is the top-level one
	members []member
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) error {
	if s.i >= len(s.b) {
		return invalidJSON("unexpected end", s.i)
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return invalidJSON("unexpected character", s.i)
}

func (s *scanner) lit(w string) error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return invalidJSON("bad literal", s.i)
	}
	s.i += len(w)
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if s.digits() == 0 {
		return invalidJSON("bad number", start)
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return invalidJSON("bad number", start)
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return invalidJSON("bad number", start)
		}
	}
	return nil
}

func (s *scanner) array(depth int) error {
	if depth > maxJSONDepth {
		return invalidJSON("nested deeper than "+strconv.Itoa(maxJSONDepth), s.i)
	}
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if err := s.value(depth); err != nil {
			return err
		}
		if end, err := s.next(']'); end || err != nil {
			return err
		}
	}
}

// next scans what follows an element of an array or a member of an
// object that closer ends: a ',' before another one (end false), or
// closer (end true).
func (s *scanner) next(closer byte) (end bool, err error) {
	s.ws()
	if s.i >= len(s.b) {
		return false, invalidJSON("unexpected end", s.i)
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, nil
	case closer:
		s.i++
		return true, nil
	default:
		return false, invalidJSON("want ',' or '"+string(closer)+"'", s.i)
	}
}

// smallObject is how many member names are compared pairwise before a
// map takes over (a hostile object with many members stays linear).
const smallObject = 16

func (s *scanner) object(depth int) error {
	if depth > maxJSONDepth {
		return invalidJSON("nested deeper than "+strconv.Itoa(maxJSONDepth), s.i)
	}
	top := s.top
	s.top = false
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	// A small object's names are compared pairwise with bytes.EqualFold
	// (the same relation as equal foldKeys), as slices of the body where
	// they hold no escape, so an object costs no allocation; past
	// smallObject names a map of foldKeys keeps a hostile object linear.
	var room [smallObject][]byte
	few := room[:0]
	var many map[string]bool
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return invalidJSON("want a member name", s.i)
		}
		at := s.i
		key, err := s.str(true)
		if err != nil {
			return err
		}
		switch {
		case many != nil:
			f := foldKey(string(key))
			if many[f] {
				return dupKey(string(key), at)
			}
			many[f] = true
		case len(few) < smallObject:
			for _, k := range few {
				if bytes.EqualFold(k, key) {
					return dupKey(string(key), at)
				}
			}
			few = append(few, key)
		default:
			many = make(map[string]bool, 4*smallObject)
			for _, k := range few {
				many[foldKey(string(k))] = true
			}
			f := foldKey(string(key))
			if many[f] {
				return dupKey(string(key), at)
			}
			many[f] = true
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return invalidJSON("want ':'", s.i)
		}
		s.i++
		s.ws()
		vStart := s.i
		if err := s.value(depth); err != nil {
			return err
		}
		if top {
			s.members = append(s.members, member{key: string(key), vStart: vStart, vEnd: s.i})
		}
		if end, err := s.next('}'); end || err != nil {
			return err
		}
	}
}

func dupKey(key string, at int) error {
	return &bodyError{"duplicate_key", "request body repeats the member name " + strconv.Quote(key) +
		" (names must be unique, also ignoring case) at byte " + strconv.Itoa(at)}
}

// str scans a string starting at its opening quote; with decode it
// returns the decoded text: a slice of the body itself when the string
// holds no escape (no copy), else a fresh one.
func (s *scanner) str(decode bool) ([]byte, error) {
	start := s.i
	s.i++
	var out []byte
	plain := s.i // start of the run not yet copied to out
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			var v []byte
			if decode {
				if out == nil {
					v = s.b[plain:s.i:s.i]
				} else {
					v = append(out, s.b[plain:s.i]...)
				}
			}
			s.i++
			return v, nil
		case c < 0x20:
			return nil, invalidJSON("control character in a string", s.i)
		case c == '\\':
			if decode {
				out = append(out, s.b[plain:s.i]...)
			}
			r, err := s.escape()
			if err != nil {
				return nil, err
			}
			if decode {
				out = utf8.AppendRune(out, r)
			}
			plain = s.i
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n <= 1 {
				return nil, invalidJSON("invalid UTF-8", s.i)
			}
			s.i += n
		}
	}
	return nil, invalidJSON("unterminated string", start)
}

// escape scans one escape sequence at s.i (the backslash).
func (s *scanner) escape() (rune, error) {
	at := s.i
	if s.i+1 >= len(s.b) {
		return 0, invalidJSON("unterminated string", at)
	}
	c := s.b[s.i+1]
	s.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		return 0, invalidJSON("bad escape", at)
	}
	r, ok := s.hex4()
	if !ok {
		return 0, invalidJSON("bad \\u escape", at)
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, invalidJSON("lone surrogate", at)
	case r >= 0xD800 && r <= 0xDBFF:
		if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
			return 0, invalidJSON("lone surrogate", at)
		}
		s.i += 2
		lo, ok := s.hex4()
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, invalidJSON("lone surrogate", at)
		}
		return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), nil
	}
	return r, nil
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// foldKey maps a name to a canonical form such that two names have the
// same form exactly when strings.EqualFold (Unicode simple folding, the
// rule encoding/json uses to match names) holds: each rune becomes the
// smallest rune of its folding orbit ("K", "k" and KELVIN SIGN all become
// "K").
func foldKey(k string) string {
	ascii := true
	for i := 0; i < len(k); i++ {
		if k[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToUpper(k)
	}
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// edit replaces raw[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// apply returns raw with the edits applied; edits must not overlap.
func apply(raw []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return raw
	}
	// Few edits: a simple insertion sort keeps them in order.
	for i := 1; i < len(edits); i++ {
		for j := i; j > 0 && edits[j].start < edits[j-1].start; j-- {
			edits[j], edits[j-1] = edits[j-1], edits[j]
		}
	}
	n := len(raw)
	for _, e := range edits {
		n += len(e.text) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, e := range edits {
		out = append(out, raw[at:e.start]...)
		out = append(out, e.text...)
		at = e.end
	}
	return append(out, raw[at:]...)
}

// insertMembers returns the edit that adds members (each `"name":value`)
// first in the object whose '{' is at raw[open].
func insertMembers(raw []byte, open int, members ...string) edit {
	i := open + 1
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	text := strings.Join(members, ",")
	if i < len(raw) && raw[i] != '}' {
		text += ","
	}
	return edit{open + 1, open + 1, text}
}

// readCount reads an optional non-negative integer member.
func (j *jsonBody) readCount(name string) (int64, bool, error) {
	v, ok, err := j.lookup(name)
	if err != nil || !ok || string(v) == "null" {
		return 0, false, err
	}
	var n json.Number
	if json.Unmarshal(v, &n) != nil {
		return 0, false, &bodyError{"invalid_field", name + " must be a non-negative integer"}
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && errors.Is(ne.Err, strconv.ErrRange) && n[0] != '-' {
			return maxCount, true, nil
		}
		return 0, false, &bodyError{"invalid_field", name + " must be a non-negative integer"}
	}
	if i < 0 {
		return 0, false, &bodyError{"invalid_field", name + " must be a non-negative integer"}
	}
	return min(i, maxCount), true, nil
}

// maxCount bounds counts read from a body, so sums of them cannot
// overflow.
const maxCount = 1 << 40
