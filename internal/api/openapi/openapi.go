// Package openapi reads api/openapi.yaml, the description of IronClaw's
// HTTP API, for the tools that hold the code to it: the tests comparing it
// with the Go wire types (Document.MatchGo), with the daemon's routes and
// with the answers the API tests receive (Document.CheckResponse), and the
// generator of the TypeScript SDK's wire types (Document.TypeScript, run
// by tsgen).
//
// It understands the part of OpenAPI 3.1 and JSON Schema the document
// uses: objects with properties, required and additionalProperties;
// arrays; string, integer, number, boolean and null; enum and const;
// oneOf, anyOf and allOf; local $refs. A keyword it does not know is an
// error when the document is loaded, so the document cannot come to say
// something the checks silently ignore.
//
//go:generate go run ./tsgen
package openapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Path is the document's place in the repository.
const Path = "api/openapi.yaml"

// Document is the parsed description.
type Document struct {
	OpenAPI    string     `yaml:"openapi"`
	Paths      Paths      `yaml:"paths"`
	Components Components `yaml:"components"`
}

// Components holds the document's named parts.
type Components struct {
	Schemas       Schemas                 `yaml:"schemas"`
	Responses     map[string]*Response    `yaml:"responses"`
	Parameters    map[string]*Parameter   `yaml:"parameters"`
	RequestBodies map[string]*RequestBody `yaml:"requestBodies"`
}

// Paths are the routes, in the document's order.
type Paths []PathEntry

// PathEntry is one path template and what it serves.
type PathEntry struct {
	Path string
	Item *PathItem
}

// PathItem is one path's operations, by lower-case method.
type PathItem struct {
	Parameters []*Parameter
	Operations map[string]*Operation
}

// Methods are the HTTP methods a path item may hold.
var Methods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

// Operation is one method on one path.
type Operation struct {
	OperationID string                 `yaml:"operationId"`
	Summary     string                 `yaml:"summary"`
	Description string                 `yaml:"description"`
	Tags        []string               `yaml:"tags"`
	Role        string                 `yaml:"x-ironclaw-role"`
	Security    *[]map[string][]string `yaml:"security"`
	Parameters  []*Parameter           `yaml:"parameters"`
	RequestBody *RequestBody           `yaml:"requestBody"`
	Responses   map[string]*Response   `yaml:"responses"`
}

// Parameter is a query or path parameter, or a $ref to one.
type Parameter struct {
	Ref         string  `yaml:"$ref"`
	Name        string  `yaml:"name"`
	In          string  `yaml:"in"`
	Required    bool    `yaml:"required"`
	Description string  `yaml:"description"`
	Schema      *Schema `yaml:"schema"`
	Style       string  `yaml:"style"`
	Explode     *bool   `yaml:"explode"`
}

// RequestBody is a request's body, or a $ref to one.
type RequestBody struct {
	Ref         string                `yaml:"$ref"`
	Description string                `yaml:"description"`
	Required    bool                  `yaml:"required"`
	Content     map[string]*MediaType `yaml:"content"`
}

// Response is one status's answer, or a $ref to one.
type Response struct {
	Ref         string                  `yaml:"$ref"`
	Description string                  `yaml:"description"`
	Headers     map[string]*HeaderValue `yaml:"headers"`
	Content     map[string]*MediaType   `yaml:"content"`
}

// HeaderValue describes a response header.
type HeaderValue struct {
	Description string  `yaml:"description"`
	Schema      *Schema `yaml:"schema"`
}

// MediaType is the schema of one content type. For application/x-ndjson
// it is the schema of each line.
type MediaType struct {
	Schema *Schema `yaml:"schema"`
}

// Schema is a JSON Schema, or a $ref to one.
type Schema struct {
	Ref         string `yaml:"$ref"`
	Types       Types  `yaml:"type"`
	Format      string `yaml:"format"`
	Description string `yaml:"description"`
	Deprecated  bool   `yaml:"deprecated"`
	Examples    []any  `yaml:"examples"`

	Properties           Schemas     `yaml:"properties"`
	Required             []string    `yaml:"required"`
	AdditionalProperties *Additional `yaml:"additionalProperties"`
	MinProperties        *int        `yaml:"minProperties"`
	MaxProperties        *int        `yaml:"maxProperties"`

	Items *Schema `yaml:"items"`

	Enum      []any    `yaml:"enum"`
	Const     any      `yaml:"const"`
	Minimum   *float64 `yaml:"minimum"`
	Maximum   *float64 `yaml:"maximum"`
	MaxLength *int     `yaml:"maxLength"`
	Pattern   string   `yaml:"pattern"`

	OneOf []*Schema `yaml:"oneOf"`
	AnyOf []*Schema `yaml:"anyOf"`
	AllOf []*Schema `yaml:"allOf"`
}

// Types is a schema's type: one name or a list of them.
type Types []string

func (t *Types) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*t = Types{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*t = list
	return nil
}

// Has reports whether name is one of the types.
func (t Types) Has(name string) bool { return slices.Contains(t, name) }

// Additional is additionalProperties: false, true, or a schema.
type Additional struct {
	Allowed bool
	Schema  *Schema
}

func (a *Additional) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		return n.Decode(&a.Allowed)
	}
	a.Allowed = true
	return decodeStrict(n, &a.Schema)
}

// Schemas are named schemas in the document's order.
type Schemas []NamedSchema

// NamedSchema is one entry of Schemas.
type NamedSchema struct {
	Name   string
	Schema *Schema
}

// Get returns the schema called name, or nil.
func (s Schemas) Get(name string) *Schema {
	for _, e := range s {
		if e.Name == name {
			return e.Schema
		}
	}
	return nil
}

// Names lists the names in order.
func (s Schemas) Names() []string {
	out := make([]string, len(s))
	for i, e := range s {
		out[i] = e.Name
	}
	return out
}

func (s *Schemas) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of schemas", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		var sc *Schema
		if err := decodeStrict(n.Content[i+1], &sc); err != nil {
			return fmt.Errorf("%s: %w", n.Content[i].Value, err)
		}
		*s = append(*s, NamedSchema{n.Content[i].Value, sc})
	}
	return nil
}

func (p *Paths) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of paths", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		item := &PathItem{Operations: map[string]*Operation{}}
		v := n.Content[i+1]
		if v.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: want a path item", v.Line)
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			key, val := v.Content[j].Value, v.Content[j+1]
			switch {
			case key == "parameters":
				if err := decodeStrict(val, &item.Parameters); err != nil {
					return err
				}
			case slices.Contains(Methods, key):
				var op Operation
				if err := decodeStrict(val, &op); err != nil {
					return fmt.Errorf("%s %s: %w", key, n.Content[i].Value, err)
				}
				item.Operations[key] = &op
			default:
				return fmt.Errorf("line %d: path item key %q is not understood", v.Content[j].Line, key)
			}
		}
		*p = append(*p, PathEntry{n.Content[i].Value, item})
	}
	return nil
}

// expandAliases replaces every alias (*name) by a copy of what its anchor
// (&name) marks, so that parts of the tree decode on their own.
func expandAliases(n *yaml.Node) {
	for i, c := range n.Content {
		if c.Kind == yaml.AliasNode {
			cp := *c.Alias
			cp.Anchor = ""
			n.Content[i] = &cp
			c = &cp
		}
		c.Anchor = ""
		expandAliases(c)
	}
}

// decodeStrict decodes n into v, refusing unknown keys.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// Load reads and parses the document at file.
func Load(file string) (*Document, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// LoadRepo reads the document of the repository holding dir (the nearest
// parent with a go.mod).
func LoadRepo(dir string) (*Document, error) {
	root, err := RepoRoot(dir)
	if err != nil {
		return nil, err
	}
	return Load(filepath.Join(root, Path))
}

// RepoRoot is the nearest parent of dir holding a go.mod.
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("openapi: no go.mod above " + dir)
		}
		d = up
	}
}

// Parse parses a document and checks that every $ref resolves.
func Parse(b []byte) (*Document, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	if len(root.Content) != 1 {
		return nil, errors.New("openapi: empty document")
	}
	expandAliases(&root)
	var d struct {
		OpenAPI    string `yaml:"openapi"`
		Info       any    `yaml:"info"`
		Servers    any    `yaml:"servers"`
		Security   any    `yaml:"security"`
		Tags       any    `yaml:"tags"`
		Paths      Paths  `yaml:"paths"`
		Components struct {
			Components      `yaml:",inline"`
			SecuritySchemes map[string]any `yaml:"securitySchemes"`
		} `yaml:"components"`
	}
	if err := decodeStrict(root.Content[0], &d); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	doc := &Document{OpenAPI: d.OpenAPI, Paths: d.Paths, Components: d.Components.Components}
	if err := doc.checkRefs(); err != nil {
		return nil, err
	}
	return doc, nil
}

// Schema resolves s's $ref, if any.
func (d *Document) Schema(s *Schema) (*Schema, error) {
	for i := 0; s != nil && s.Ref != ""; i++ {
		name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
		next := d.Components.Schemas.Get(name)
		if !ok || next == nil || i > 32 {
			return nil, fmt.Errorf("openapi: unresolvable $ref %q", s.Ref)
		}
		s = next
	}
	return s, nil
}

// RefName is the schema name s refers to, or "".
func RefName(s *Schema) string {
	name, _ := strings.CutPrefix(s.Ref, "#/components/schemas/")
	return name
}

// resolve returns what ref names among the components in m (under
// prefix), or v itself when ref is empty.
func resolve[T any](v *T, ref, prefix string, m map[string]*T) (*T, error) {
	if v == nil || ref == "" {
		return v, nil
	}
	name, ok := strings.CutPrefix(ref, prefix)
	out := m[name]
	if !ok || out == nil {
		return nil, fmt.Errorf("openapi: unresolvable $ref %q", ref)
	}
	return out, nil
}

// Response resolves r's $ref, if any.
func (d *Document) Response(r *Response) (*Response, error) {
	if r == nil {
		return nil, nil
	}
	return resolve(r, r.Ref, "#/components/responses/", d.Components.Responses)
}

func (d *Document) parameter(p *Parameter) (*Parameter, error) {
	return resolve(p, p.Ref, "#/components/parameters/", d.Components.Parameters)
}

func (d *Document) requestBody(b *RequestBody) (*RequestBody, error) {
	if b == nil {
		return nil, nil
	}
	return resolve(b, b.Ref, "#/components/requestBodies/", d.Components.RequestBodies)
}

// checkRefs resolves every reference of the document once.
func (d *Document) checkRefs() error {
	var walk func(s *Schema) error
	walk = func(s *Schema) error {
		if s == nil {
			return nil
		}
		if s.Ref != "" {
			_, err := d.Schema(s)
			return err
		}
		for _, p := range s.Properties {
			if err := walk(p.Schema); err != nil {
				return err
			}
		}
		if s.AdditionalProperties != nil {
			if err := walk(s.AdditionalProperties.Schema); err != nil {
				return err
			}
		}
		for _, list := range [][]*Schema{s.OneOf, s.AnyOf, s.AllOf, {s.Items}} {
			for _, c := range list {
				if err := walk(c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, e := range d.Components.Schemas {
		if err := walk(e.Schema); err != nil {
			return fmt.Errorf("schema %s: %w", e.Name, err)
		}
	}
	content := func(c map[string]*MediaType) error {
		for _, m := range c {
			if err := walk(m.Schema); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range d.Components.Responses {
		if err := content(r.Content); err != nil {
			return err
		}
	}
	for _, pe := range d.Paths {
		for _, p := range pe.Item.Parameters {
			if _, err := d.parameter(p); err != nil {
				return err
			}
		}
		for m, op := range pe.Item.Operations {
			where := strings.ToUpper(m) + " " + pe.Path
			if op.Role == "" {
				return fmt.Errorf("openapi: %s has no x-ironclaw-role", where)
			}
			for _, p := range op.Parameters {
				if _, err := d.parameter(p); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
			}
			rb, err := d.requestBody(op.RequestBody)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if rb != nil {
				if err := content(rb.Content); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
			}
			for st, r := range op.Responses {
				r, err := d.Response(r)
				if err != nil {
					return fmt.Errorf("%s %s: %w", where, st, err)
				}
				if err := content(r.Content); err != nil {
					return fmt.Errorf("%s %s: %w", where, st, err)
				}
			}
		}
	}
	return nil
}

// Route is one operation and where it is.
type Route struct {
	Method string // upper case
	Path   string // the template, e.g. /v1/sandboxes/{id}
	Op     *Operation
}

// Routes lists every operation in the document's order.
func (d *Document) Routes() []Route {
	var out []Route
	for _, pe := range d.Paths {
		for _, m := range Methods {
			if op := pe.Item.Operations[m]; op != nil {
				out = append(out, Route{strings.ToUpper(m), pe.Path, op})
			}
		}
	}
	return out
}

// Find returns the operation serving method and a concrete path ("" in
// template segments matches any one segment), and the route.
func (d *Document) Find(method, path string) (Route, bool) {
	segs := strings.Split(path, "/")
	for _, r := range d.Routes() {
		if r.Method != strings.ToUpper(method) {
			continue
		}
		tpl := strings.Split(r.Path, "/")
		if len(tpl) != len(segs) {
			continue
		}
		ok := true
		for i, t := range tpl {
			if !(strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && segs[i] != "") && t != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return r, true
		}
	}
	return Route{}, false
}
