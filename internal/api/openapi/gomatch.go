package openapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Forms names, for Go types with a JSON form of their own (a custom
// MarshalJSON), the schema their fields must refer to.
type Forms map[reflect.Type]string

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// MatchGo checks that the Go type t encodes as the schema called name
// describes: the same members with the same JSON names; a member is
// required exactly when the Go field has neither omitempty nor omitzero;
// and each member's type matches, recursively (a struct against the object
// it refers to, a slice against an array, a map against
// additionalProperties). time.Time is a date-time string, json.RawMessage
// any JSON (a schema without a type, possibly a oneOf or anyOf of shapes,
// or an object without members), and a
// type in forms must refer to the schema forms names. Enums, bounds and
// descriptions are not compared.
func (d *Document) MatchGo(name string, t reflect.Type, forms Forms) error {
	s := d.Components.Schemas.Get(name)
	if s == nil {
		return fmt.Errorf("no schema %s in the document", name)
	}
	m := matcher{d: d, forms: forms, seen: map[string]bool{}}
	return m.match(s, t, name)
}

type matcher struct {
	d     *Document
	forms Forms
	seen  map[string]bool // type and schema pairs matched or being matched
}

func (m *matcher) match(s *Schema, t reflect.Type, at string) error {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if form, ok := m.forms[t]; ok {
		if RefName(s) != form {
			return fmt.Errorf("%s: %s must be $ref %s, not %s", at, t, form, describe(s))
		}
		return nil
	}
	key := t.String() + " " + s.Ref
	if s.Ref != "" {
		if m.seen[key] {
			return nil
		}
		m.seen[key] = true
	}
	s, err := m.d.Schema(s)
	if err != nil {
		return err
	}
	switch {
	case t == timeType:
		if !s.Types.Has("string") || s.Format != "date-time" {
			return fmt.Errorf("%s: a time.Time is a date-time string, not %s", at, describe(s))
		}
		return nil
	case t == rawType:
		// Raw JSON: any value, an object without members, or one of the
		// shapes the schema lists (checked where the value is decoded).
		if len(s.Types) == 0 || s.Types.Has("object") && len(s.Properties) == 0 && s.AdditionalProperties == nil {
			return nil
		}
		return fmt.Errorf("%s: a json.RawMessage is any JSON, not %s", at, describe(s))
	}
	want := ""
	switch t.Kind() {
	case reflect.String:
		want = "string"
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
	case reflect.Float32, reflect.Float64:
		want = "number"
	case reflect.Slice, reflect.Array:
		if !s.Types.Has("array") || s.Items == nil {
			return fmt.Errorf("%s: a %s is an array, not %s", at, t, describe(s))
		}
		return m.match(s.Items, t.Elem(), at+"[]")
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return fmt.Errorf("%s: map keys must be strings (%s)", at, t)
		}
		ap := s.AdditionalProperties
		if !s.Types.Has("object") || ap == nil || ap.Schema == nil || len(s.Properties) > 0 {
			return fmt.Errorf("%s: a %s is an object with additionalProperties, not %s", at, t, describe(s))
		}
		return m.match(ap.Schema, t.Elem(), at+"{}")
	case reflect.Struct:
		return m.matchStruct(s, t, at)
	default:
		return fmt.Errorf("%s: %s has no JSON schema form here", at, t)
	}
	if !s.Types.Has(want) {
		return fmt.Errorf("%s: a %s is %s, not %s", at, t, want, describe(s))
	}
	return nil
}

// goField is one JSON member of a Go struct.
type goField struct {
	name     string
	optional bool
	typ      reflect.Type
}

// jsonFields lists t's JSON members as encoding/json sees them (embedded
// structs flattened).
func jsonFields(t reflect.Type) []goField {
	var out []goField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		optional := false
		for _, o := range strings.Split(opts, ",") {
			if o == "omitempty" || o == "omitzero" {
				optional = true
			}
		}
		out = append(out, goField{name, optional, ft})
	}
	return out
}

func (m *matcher) matchStruct(s *Schema, t reflect.Type, at string) error {
	obj := s
	if len(s.AllOf) > 0 {
		merged, err := m.d.merge(s)
		if err != nil {
			return err
		}
		if merged == nil {
			return fmt.Errorf("%s: allOf of something other than objects", at)
		}
		obj = merged
	}
	if !obj.Types.Has("object") {
		return fmt.Errorf("%s: a struct %s is an object, not %s", at, t, describe(s))
	}
	fields := jsonFields(t)
	var goNames, docNames []string
	for _, f := range fields {
		goNames = append(goNames, f.name)
	}
	for _, p := range obj.Properties {
		docNames = append(docNames, p.Name)
	}
	for _, n := range goNames {
		if !slices.Contains(docNames, n) {
			return fmt.Errorf("%s: %s has member %q, which the document does not", at, t, n)
		}
	}
	for _, n := range docNames {
		if !slices.Contains(goNames, n) {
			return fmt.Errorf("%s: the document has member %q, which %s does not", at, n, t)
		}
	}
	for _, r := range obj.Required {
		if !slices.Contains(docNames, r) {
			return fmt.Errorf("%s: required member %q is not a property", at, r)
		}
	}
	for _, f := range fields {
		req := slices.Contains(obj.Required, f.name)
		switch {
		case req && f.optional:
			return fmt.Errorf("%s.%s: required in the document, omitempty in %s", at, f.name, t)
		case !req && !f.optional:
			return fmt.Errorf("%s.%s: always written by %s (no omitempty), so the document must list it as required", at, f.name, t)
		}
		if err := m.match(obj.Properties.Get(f.name), f.typ, at+"."+f.name); err != nil {
			return err
		}
	}
	return nil
}

func describe(s *Schema) string {
	switch {
	case s == nil:
		return "nothing"
	case s.Ref != "":
		return "$ref " + RefName(s)
	case len(s.Types) > 0:
		out := strings.Join(s.Types, "|")
		if s.Format != "" {
			out += " (" + s.Format + ")"
		}
		return out
	case len(s.OneOf) > 0:
		return "a oneOf"
	case len(s.AllOf) > 0:
		return "an allOf"
	}
	return "any JSON"
}
