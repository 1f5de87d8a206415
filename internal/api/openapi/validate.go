package openapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks a JSON value (decoded with UseNumber) against s.
//
// Strict validation treats every object schema without
// additionalProperties as closed, and merges the object members of an
// allOf before checking, so that an answer holding a member the document
// does not describe fails: the document's answers are open for clients,
// but the daemon must not write what the document does not say.
func (d *Document) Validate(s *Schema, v any, strict bool) error {
	return d.validate(s, v, strict, "$")
}

func (d *Document) validate(s *Schema, v any, strict bool, at string) error {
	s, err := d.Schema(s)
	if err != nil {
		return err
	}
	if s == nil {
		return nil
	}
	if len(s.AllOf) > 0 {
		merged, err := d.merge(s)
		if err != nil {
			return err
		}
		if merged != nil {
			return d.validate(merged, v, strict, at)
		}
		for _, c := range s.AllOf {
			if err := d.validate(c, v, strict, at); err != nil {
				return err
			}
		}
	}
	if len(s.OneOf) > 0 {
		var errs []error
		for _, c := range s.OneOf {
			if err := d.validate(c, v, strict, at); err != nil {
				errs = append(errs, err)
			}
		}
		if n := len(s.OneOf) - len(errs); n != 1 {
			return fmt.Errorf("%s: matches %d of the oneOf alternatives, want 1 (%v)", at, n, errors.Join(errs...))
		}
	}
	if len(s.AnyOf) > 0 {
		var errs []error
		for _, c := range s.AnyOf {
			if err := d.validate(c, v, strict, at); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == len(s.AnyOf) {
			return fmt.Errorf("%s: matches none of the anyOf alternatives (%v)", at, errors.Join(errs...))
		}
	}
	if s.Const != nil && !sameScalar(s.Const, v) {
		return fmt.Errorf("%s: %v, want %v", at, v, s.Const)
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return sameScalar(e, v) }) {
		return fmt.Errorf("%s: %v is none of %v", at, v, s.Enum)
	}
	if len(s.Types) > 0 && !slices.ContainsFunc(s.Types, func(t string) bool { return isType(t, v) }) {
		return fmt.Errorf("%s: %s, want %s", at, kindOf(v), strings.Join(s.Types, " or "))
	}
	switch x := v.(type) {
	case string:
		if s.Format == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, x); err != nil {
				return fmt.Errorf("%s: %q is not an RFC 3339 time", at, x)
			}
		}
		if s.MaxLength != nil && len([]rune(x)) > *s.MaxLength {
			return fmt.Errorf("%s: longer than %d", at, *s.MaxLength)
		}
		if s.Pattern != "" {
			re, err := regexp.Compile(s.Pattern)
			if err != nil {
				return fmt.Errorf("%s: pattern %q: %v", at, s.Pattern, err)
			}
			if !re.MatchString(x) {
				return fmt.Errorf("%s: %q does not match %s", at, x, s.Pattern)
			}
		}
	case json.Number:
		f, _ := x.Float64()
		if s.Minimum != nil && f < *s.Minimum {
			return fmt.Errorf("%s: %v is below %v", at, x, *s.Minimum)
		}
		if s.Maximum != nil && f > *s.Maximum {
			return fmt.Errorf("%s: %v is above %v", at, x, *s.Maximum)
		}
	case []any:
		for i, e := range x {
			if err := d.validate(s.Items, e, strict, at+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case map[string]any:
		return d.validateObject(s, x, strict, at)
	}
	return nil
}

func (d *Document) validateObject(s *Schema, x map[string]any, strict bool, at string) error {
	if s.MinProperties != nil && len(x) < *s.MinProperties {
		return fmt.Errorf("%s: %d members, want at least %d", at, len(x), *s.MinProperties)
	}
	if s.MaxProperties != nil && len(x) > *s.MaxProperties {
		return fmt.Errorf("%s: %d members, want at most %d", at, len(x), *s.MaxProperties)
	}
	for _, r := range s.Required {
		if _, ok := x[r]; !ok {
			return fmt.Errorf("%s: the required member %q is missing", at, r)
		}
	}
	closed := strict && s.Properties != nil && s.AdditionalProperties == nil
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if p := s.Properties.Get(k); p != nil {
			if err := d.validate(p, x[k], strict, at+"."+k); err != nil {
				return err
			}
			continue
		}
		switch ap := s.AdditionalProperties; {
		case ap != nil && ap.Schema != nil:
			if err := d.validate(ap.Schema, x[k], strict, at+"."+k); err != nil {
				return err
			}
		case ap != nil && !ap.Allowed, closed:
			return fmt.Errorf("%s: member %q is not in the document", at, k)
		}
	}
	return nil
}

// merge flattens an allOf of objects into one object schema, or returns
// nil when a member is not an object.
func (d *Document) merge(s *Schema) (*Schema, error) {
	out := &Schema{Types: Types{"object"}, Properties: Schemas{}}
	for _, c := range s.AllOf {
		c, err := d.Schema(c)
		if err != nil {
			return nil, err
		}
		if len(c.AllOf) > 0 {
			if c, err = d.merge(c); err != nil || c == nil {
				return nil, err
			}
		}
		if !c.Types.Has("object") || len(c.OneOf)+len(c.AnyOf) > 0 {
			return nil, nil
		}
		out.Properties = append(out.Properties, c.Properties...)
		out.Required = append(out.Required, c.Required...)
		if c.AdditionalProperties != nil && !c.AdditionalProperties.Allowed {
			out.AdditionalProperties = c.AdditionalProperties
		}
	}
	return out, nil
}

func isType(t string, v any) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := x.Float64()
		return t == "integer" && err == nil && f == math.Trunc(f) && !strings.ContainsAny(x.String(), ".eE")
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

func kindOf(v any) string {
	for _, t := range []string{"null", "boolean", "string", "integer", "number", "array", "object"} {
		if isType(t, v) {
			return t
		}
	}
	return fmt.Sprintf("%T", v)
}

// sameScalar compares a document's enum or const value with a JSON value.
func sameScalar(want, v any) bool {
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		switch w := want.(type) {
		case int:
			return f == float64(w)
		case float64:
			return f == w
		}
		return false
	}
	return want == v
}

// decodeJSON decodes one JSON value keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// CheckResponse checks an answer of the API against the document: the
// route exists, the status is one it lists (or it has a default), the
// content type is one the status lists, and the body (each line of an
// NDJSON body; blank lines are keep-alives) validates strictly. Bodies
// that are not JSON (files, metrics) are not looked into.
func (d *Document) CheckResponse(method, path string, status int, contentType string, body []byte) error {
	rt, ok := d.Find(method, path)
	if !ok {
		return fmt.Errorf("%s %s: no such operation in the document", method, path)
	}
	where := method + " " + rt.Path
	resp := rt.Op.Responses[strconv.Itoa(status)]
	if resp == nil {
		resp = rt.Op.Responses["default"]
	}
	if resp == nil {
		return fmt.Errorf("%s: status %d is not in the document", where, status)
	}
	resp, err := d.Response(resp)
	if err != nil {
		return err
	}
	if len(resp.Content) == 0 {
		if len(bytes.TrimSpace(body)) != 0 {
			return fmt.Errorf("%s: status %d has no body in the document, got %.100q", where, status, body)
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("%s: status %d: content type %q: %v", where, status, contentType, err)
	}
	media := resp.Content[mt]
	if media == nil {
		return fmt.Errorf("%s: status %d: content type %s is not in the document", where, status, mt)
	}
	switch mt {
	case "application/json":
		v, err := decodeJSON(body)
		if err != nil {
			return fmt.Errorf("%s: status %d: %v", where, status, err)
		}
		if err := d.Validate(media.Schema, v, true); err != nil {
			return fmt.Errorf("%s: status %d: %w", where, status, err)
		}
	case "application/x-ndjson":
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 64<<20)
		for n := 1; sc.Scan(); n++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			v, err := decodeJSON(line)
			if err == nil {
				err = d.Validate(media.Schema, v, true)
			}
			if err != nil {
				return fmt.Errorf("%s: status %d: line %d: %w", where, status, n, err)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}
