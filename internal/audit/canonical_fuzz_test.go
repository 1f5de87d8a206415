package audit

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzCanonicalJSON checks the hand-written parser and canonical encoder
// against encoding/json: the same inputs are valid (except duplicate keys,
// which the parser refuses on purpose), the canonical text decodes to the
// same value as the input, and canonicalising is idempotent.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `""`, `0`, `-0.5e+10`, `1E3`, `01`, `1.`, `.5`, `-`, `true`, `nul`,
		`{"a":1,"b":[true,false,null,{"c":"d"}]}`,
		`{"s":"\u00e9\ud83d\ude00\ud800\udc00\ud800x\udc00\\\/\b\f\n\r\t"}`,
		`{"s":"\ud800\u0041"}`, "{\"s\":\"\xff\xfe\"}", "\"\x01\"",
		` { "a" : [ 1 , 2 ] } `, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1,"a":2}`,
		`"\u12"`, `"\x"`, `[[[[[]]]]]`, `12345678901234567890123`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := parseJSON(in)
		valid := json.Valid(in)
		if err != nil {
			if valid && !strings.Contains(err.Error(), "duplicate") && !strings.Contains(err.Error(), "nested") {
				t.Fatalf("parser refuses valid JSON %q: %v", in, err)
			}
			return
		}
		if !valid {
			t.Fatalf("parser accepts invalid JSON %q", in)
		}
		out := appendCanonical(nil, v)
		if !json.Valid(out) {
			t.Fatalf("canonical form of %q is invalid: %q", in, out)
		}
		if again := appendCanonical(nil, mustParse(t, out)); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		if want, got := stdDecode(t, in), stdDecode(t, out); !reflect.DeepEqual(want, got) {
			t.Fatalf("canonical form changes the value: %q -> %q\n%#v\n%#v", in, out, want, got)
		}
	})
}

func mustParse(t *testing.T, b []byte) any {
	t.Helper()
	v, err := parseJSON(b)
	if err != nil {
		t.Fatalf("reparse %q: %v", b, err)
	}
	return v
}

func stdDecode(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json: %q: %v", b, err)
	}
	return v
}
