package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A parsed JSON value: nil, bool, json.Number, string, []any or *object.
// Objects keep their members as a slice, not a map, so a duplicate key is
// seen (and refused) instead of silently collapsing to the last one.
type object struct {
	members []member
}

type member struct {
	key string
	val any
}

// maxDepth bounds nesting, so hostile input cannot exhaust the stack of
// the recursive parser. encoding/json allows 10000; audit data is shallow.
const maxDepth = 1000

// parseJSON parses one JSON value (RFC 8259) and requires that nothing but
// white space follows it. Numbers are kept as their literal text
// (json.Number): going through float64 would round integers above 2^53,
// which ids and byte counts can exceed. Invalid UTF-8 and lone surrogate
// escapes in strings become U+FFFD, as encoding/json does.
//
// It is hand-written rather than built on json.Decoder.Token because it runs
// on every Append, where Token's per-call overhead was the largest cost, and
// because it must see duplicate keys, which decoding into a map hides.
func parseJSON(raw []byte) (any, error) {
	p := parser{b: raw}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(p.b) {
		return nil, p.errorf("trailing data after JSON value")
	}
	return v, nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if p.i >= len(p.b) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	default:
		return nil, p.errorf("unexpected character %q", c)
	}
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		return p.errorf("invalid literal")
	}
	p.i += len(word)
	return nil
}

func (p *parser) object(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errorf("nested deeper than %d", maxDepth)
	}
	p.i++ // '{'
	o := &object{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return o, nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.errorf("expected object key")
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.errorf("expected ':' after object key")
		}
		p.i++
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		o.members = append(o.members, member{key: key, val: v})
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.errorf("unterminated object")
		}
		if p.b[p.i] == '}' {
			p.i++
			break
		}
		if p.b[p.i] != ',' {
			return nil, p.errorf("expected ',' or '}' in object")
		}
		p.i++
	}
	slices.SortFunc(o.members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	for i := 1; i < len(o.members); i++ {
		if o.members[i].key == o.members[i-1].key {
			return nil, fmt.Errorf("duplicate object key %q", o.members[i].key)
		}
	}
	return o, nil
}

func (p *parser) array(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errorf("nested deeper than %d", maxDepth)
	}
	p.i++ // '['
	arr := []any{}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return arr, nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.errorf("unterminated array")
		}
		if p.b[p.i] == ']' {
			p.i++
			return arr, nil
		}
		if p.b[p.i] != ',' {
			return nil, p.errorf("expected ',' or ']' in array")
		}
		p.i++
	}
}

// number accepts exactly the RFC 8259 grammar:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func (p *parser) number() (any, error) {
	start := p.i
	b := p.b
	if p.i < len(b) && b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(b) && b[p.i] == '0':
		p.i++
	case p.i < len(b) && b[p.i] >= '1' && b[p.i] <= '9':
		for p.i < len(b) && b[p.i] >= '0' && b[p.i] <= '9' {
			p.i++
		}
	default:
		return nil, p.errorf("invalid number")
	}
	if p.i < len(b) && b[p.i] == '.' {
		p.i++
		if !p.digits() {
			return nil, p.errorf("invalid number: no digits after '.'")
		}
	}
	if p.i < len(b) && (b[p.i] == 'e' || b[p.i] == 'E') {
		p.i++
		if p.i < len(b) && (b[p.i] == '+' || b[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return nil, p.errorf("invalid number: no digits in exponent")
		}
	}
	return json.Number(b[start:p.i]), nil
}

func (p *parser) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// unescapes maps the letter after a backslash to the byte it stands for;
// 0 for \u (decoded apart) and for letters that are no escape.
var unescapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// str parses a string literal starting at the opening quote.
func (p *parser) str() (string, error) {
	p.i++ // '"'
	start := p.i
	// Fast path: printable ASCII without escapes, the common case, is
	// returned as one slice conversion.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		p.i++
	}
	out := make([]byte, 0, p.i-start+16)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.errorf("control character %#x in string", c)
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", p.errorf("unterminated escape")
			}
			e := p.b[p.i+1]
			p.i += 2
			switch {
			case unescapes[e] != 0:
				out = append(out, unescapes[e])
			case e == 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate must be followed by an escaped
					// low one; anything else is replaced, as
					// encoding/json does.
					r2 := utf8.RuneError
					if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						lo, ok := p.hex4()
						if !ok {
							return "", p.errorf("invalid \\u escape")
						}
						if dec := utf16.DecodeRune(r, lo); dec != utf8.RuneError {
							r2 = dec
						} else {
							p.i = save // lo is read on its own next time round
						}
					}
					r = r2
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", p.errorf("invalid escape '\\%c'", e)
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, p.b[p.i:p.i+size]...)
			}
			p.i += size
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.i += 4
	return r, true
}

// appendCanonical appends the canonical JSON text of v to b. The canonical
// form, which is what gets hashed and stored, is:
//
//   - no white space outside strings;
//   - object members sorted by key, comparing the keys' UTF-8 bytes (which
//     is Unicode code point order); keys are unique;
//   - numbers exactly as they appeared in the input (1.0 and 1 differ);
//   - literals null, true, false;
//   - strings in double quotes with only these escapes: \" and \\, \b \f
//     \n \r \t for those controls, \u00XX (lower-case hex) for the other
//     characters below U+0020; every other character, including '<', '>',
//     '&', U+2028 and U+2029, as its raw UTF-8 bytes. Strings are valid UTF-8
//     (the parser turns invalid bytes into U+FFFD).
//
// These rules are spelled out here, rather than borrowed from
// encoding/json's Marshal, so the hash input is stable even if the standard
// library's defaults change.
func appendCanonical(b []byte, v any) []byte {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if t {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case json.Number:
		return append(b, t...)
	case string:
		return appendString(b, t)
	case []any:
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCanonical(b, e)
		}
		return append(b, ']')
	case *object:
		b = append(b, '{')
		for i, m := range t.members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.key)
			b = append(b, ':')
			b = appendCanonical(b, m.val)
		}
		return append(b, '}')
	}
	// parseValue produces only the types above.
	panic(fmt.Sprintf("audit: appendCanonical: unexpected %T", v))
}

// shortEscapes maps each byte the canonical form writes as a backslash and
// a letter to that letter; the other control characters are written as
// \u00XX. It is unescapes turned round, less '/', which is written as is.
var shortEscapes = [utf8.RuneSelf]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\uFFFD"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case shortEscapes[c] != 0:
			b = append(b, '\\', shortEscapes[c])
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}

// CanonicalJSON returns the canonical form (see appendCanonical) of the JSON
// text raw, without redaction. Two semantically equal JSON texts (same
// members in any order, any white space) give the same bytes. It is exported
// for verifiers that re-read exported records.
func CanonicalJSON(raw []byte) ([]byte, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("audit: canonical JSON: %w", err)
	}
	return appendCanonical(nil, v), nil
}
