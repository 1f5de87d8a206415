package modelproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseBody is the model proxy reading a request body that a sandbox
// (or an agent) sent, before it checks the model and forwards the bytes.
// parseBody must accept exactly I-JSON objects (RFC 7493) whose member
// names are unique under case folding at every depth, nested at most
// maxJSONDepth deep, so that every parser downstream reads the same
// members. Checked against encoding/json and a reference written here:
//
//   - what it accepts is valid JSON, valid UTF-8, an object, has no two
//     names in one object equal under strings.EqualFold, and nests within
//     the bound; its top-level members are the object's members, in order,
//     each with the exact bytes of its value;
//   - what the reference accepts (apart from \u surrogate escapes, which
//     encoding/json replaces silently), it accepts;
//   - a refusal is a *bodyError with an audit reason and a message.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"allowed","MODEL":"other"}`,
		`{"model":"a","model":"b"}`,
		`{"a":{"k":1,"\u212a":2}}`,
		`{"x":"\ud83d\ude00","y":"\ud800"}`,
		`{"x":"\udc00"}`,
		`{"x":1e400,"y":-0.0e-0}`,
		`{"x":01}`,
		`{} {}`,
		` {"a":[[[[[[]]]]]]} `,
		`["model"]`,
		`{"a":"` + "\xff" + `"}`,
		`{"a":"\t"}`,
		`{"a":"` + "\t" + `"}`,
		"{\"\u00e9\":1,\"\u00c9\":2}",
		`{"` + strings.Repeat("k", 40) + `":{},` + strings.Repeat(`"a":0,`, 3) + `"b":0}`,
		`{"a":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
		`{"a":` + strings.Repeat("[", 255) + strings.Repeat("]", 255) + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		jb, err := parseBody(b)
		refErr := reference(b)
		if err != nil {
			var be *bodyError
			if !errors.As(err, &be) || be.reason == "" || be.msg == "" {
				t.Fatalf("parseBody(%q): error %#v is not a bodyError with a reason and a message", b, err)
			}
			if refErr == nil && !surrogateEscape.Match(b) {
				t.Fatalf("parseBody(%q) refused a strict object: %v", b, err)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("parseBody(%q) accepted what the reference refuses: %v", b, refErr)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			t.Fatalf("parseBody(%q) accepted; encoding/json: %v", b, err)
		}
		keys := topKeys(t, b)
		if len(jb.members) != len(keys) || len(top) != len(keys) {
			t.Fatalf("parseBody(%q): %d members, encoding/json sees %v", b, len(jb.members), keys)
		}
		for i, m := range jb.members {
			if m.key != keys[i] {
				t.Fatalf("parseBody(%q): member %d is %q, encoding/json reads %q", b, i, m.key, keys[i])
			}
			v := b[m.vStart:m.vEnd]
			if !json.Valid(v) || !bytes.Equal(bytes.TrimSpace(v), v) {
				t.Fatalf("parseBody(%q): member %q has the value bytes %q", b, m.key, v)
			}
			if got, ok, err := jb.lookup(m.key); !ok || err != nil || !bytes.Equal(got, v) {
				t.Fatalf("parseBody(%q): lookup(%q) = %q, %v, %v", b, m.key, got, ok, err)
			}
		}
	})
}

// surrogateEscape finds a \u escape of a UTF-16 surrogate.
var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F][0-9a-fA-F]{2}`)

// reference is the rule parseBody implements, on encoding/json's tokens:
// nil for a strict object.
func reference(b []byte) error {
	if !json.Valid(b) || !utf8.Valid(b) {
		return errors.New("not JSON or not UTF-8")
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errors.New("not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   []string
		key    bool // the next string in this object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.key {
			for _, k := range top.keys {
				if strings.EqualFold(k, s) {
					return errors.New("duplicate name " + s)
				}
			}
			top.keys = append(top.keys, s)
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // a value was read: a name comes next
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, &frame{object: tok == json.Delim('{'), key: true})
			if len(stack) > maxJSONDepth {
				return errors.New("too deep")
			}
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
		}
	}
}

// topKeys are the names of b's top-level object in order, as
// encoding/json decodes them.
func topKeys(t *testing.T, b []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: first token %v, %v", b, tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}
