package openapi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The SDK's wire types are what the generator makes of the document now.
func TestTypeScriptIsGenerated(t *testing.T) {
	root, err := RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Load(filepath.Join(root, Path))
	if err != nil {
		t.Fatal(err)
	}
	want, err := doc.TypeScript()
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, "sdk/typescript/src/wire.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("sdk/typescript/src/wire.ts is not generated from %s: run go run ./internal/api/openapi/tsgen", Path)
	}
}

const tiny = `
openapi: 3.1.0
paths:
  /v1/things/{id}:
    get:
      x-ironclaw-role: agent
      responses:
        "200":
          description: a thing
          content:
            application/json:
              schema: { $ref: "#/components/schemas/Thing" }
            application/x-ndjson:
              schema: { $ref: "#/components/schemas/Frame" }
        "204": { description: nothing }
        default:
          description: an error
          content:
            application/json:
              schema: { type: object, required: [error], properties: { error: { type: string } } }
components:
  schemas:
    Thing:
      type: object
      required: [id, when, tags]
      properties:
        id: { type: string }
        when: { type: string, format: date-time }
        tags: { type: array, items: { type: string } }
        count: { type: integer }
        size: { $ref: "#/components/schemas/Size" }
        meta: { type: object, additionalProperties: { type: string } }
        raw: { description: anything }
    Size:
      oneOf:
        - { type: integer }
        - { type: string }
    Frame:
      oneOf:
        - { type: object, required: [out], properties: { out: { type: string } } }
        - { type: object, required: [exit], properties: { exit: { type: integer } } }
`

type size int64

type thing struct {
	ID    string            `json:"id"`
	When  time.Time         `json:"when"`
	Tags  []string          `json:"tags"`
	Count int               `json:"count,omitempty"`
	Size  size              `json:"size,omitempty"`
	Meta  map[string]string `json:"meta,omitempty"`
	Raw   json.RawMessage   `json:"raw,omitempty"`
}

func parseTiny(t *testing.T) *Document {
	t.Helper()
	d, err := Parse([]byte(tiny))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The checks of the Go types fail on each kind of drift.
func TestMatchGoFindsDrift(t *testing.T) {
	d := parseTiny(t)
	forms := Forms{reflect.TypeFor[size](): "Size"}
	if err := d.MatchGo("Thing", reflect.TypeFor[thing](), forms); err != nil {
		t.Fatalf("the matching type: %v", err)
	}
	for _, c := range []struct {
		name string
		typ  reflect.Type
		want string
	}{
		{"a member the document lacks", reflect.TypeFor[struct {
			thing
			Extra string `json:"extra,omitempty"`
		}](), `member "extra"`},
		{"a member Go lacks", reflect.TypeFor[struct {
			ID   string    `json:"id"`
			When time.Time `json:"when"`
			Tags []string  `json:"tags"`
		}](), `document has member "count"`},
		{"optional in Go, required in the document", reflect.TypeFor[struct {
			thing
			ID string `json:"id,omitempty"`
		}](), "required in the document"},
		{"always written by Go, optional in the document", reflect.TypeFor[struct {
			thing
			Count int `json:"count"`
		}](), "must list it as required"},
		{"another type", reflect.TypeFor[struct {
			thing
			Count string `json:"count,omitempty"`
		}](), "is string, not integer"},
		{"a time that is not a date-time", reflect.TypeFor[struct {
			thing
			ID time.Time `json:"id"`
		}](), "date-time"},
		{"a form without its $ref", reflect.TypeFor[struct {
			thing
			Count size `json:"count,omitempty"`
		}](), "must be $ref Size"},
		{"a slice of the wrong element", reflect.TypeFor[struct {
			thing
			Tags []int `json:"tags"`
		}](), "tags[]"},
		{"a map of the wrong value", reflect.TypeFor[struct {
			thing
			Meta map[string]int `json:"meta,omitempty"`
		}](), "meta{}"},
	} {
		err := d.MatchGo("Thing", c.typ, forms)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// Strict validation refuses what the document does not describe.
func TestValidateStrict(t *testing.T) {
	d := parseTiny(t)
	thing := d.Components.Schemas.Get("Thing")
	ok := `{"id":"a","when":"2026-01-02T03:04:05.123Z","tags":["x"],"count":3,"size":"1M","meta":{"k":"v"},"raw":[1,{}]}`
	for _, c := range []struct {
		body, want string
	}{
		{ok, ""},
		{`{"id":"a","when":"2026-01-02T03:04:05Z","tags":[],"surprise":1}`, `member "surprise"`},
		{`{"id":"a","when":"2026-01-02T03:04:05Z"}`, `"tags" is missing`},
		{`{"id":"a","when":"yesterday","tags":[]}`, "RFC 3339"},
		{`{"id":"a","when":"2026-01-02T03:04:05Z","tags":[1]}`, "$.tags[0]: integer, want string"},
		{`{"id":"a","when":"2026-01-02T03:04:05Z","tags":[],"count":1.5}`, "want integer"},
		{`{"id":"a","when":"2026-01-02T03:04:05Z","tags":[],"size":true}`, "oneOf"},
		{`{"id":"a","when":"2026-01-02T03:04:05Z","tags":[],"meta":{"k":1}}`, "$.meta.k"},
	} {
		v, err := decodeJSON([]byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		err = d.Validate(thing, v, true)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
	// Not strict, an answer may grow members.
	v, _ := decodeJSON([]byte(`{"id":"a","when":"2026-01-02T03:04:05Z","tags":[],"surprise":1}`))
	if err := d.Validate(thing, v, false); err != nil {
		t.Errorf("lenient: %v", err)
	}
}

func TestCheckResponse(t *testing.T) {
	d := parseTiny(t)
	good := `{"id":"a","when":"2026-01-02T03:04:05Z","tags":[]}`
	for _, c := range []struct {
		method, path string
		status       int
		ctype, body  string
		want         string
	}{
		{"GET", "/v1/things/t1", 200, "application/json", good, ""},
		{"GET", "/v1/things/t1", 200, "application/x-ndjson", "{\"out\":\"x\"}\n\n{\"exit\":0}\n", ""},
		{"GET", "/v1/things/t1", 200, "application/x-ndjson", "{\"out\":\"x\",\"exit\":0}\n", "oneOf"},
		{"GET", "/v1/things/t1", 200, "text/plain", "hi", "content type text/plain"},
		{"GET", "/v1/things/t1", 204, "", "", ""},
		{"GET", "/v1/things/t1", 204, "", "body", "no body"},
		{"GET", "/v1/things/t1", 404, "application/json", `{"error":"gone"}`, ""},
		{"GET", "/v1/things/t1", 404, "application/json", `{"error":"gone","code":4}`, `member "code"`},
		{"POST", "/v1/things/t1", 200, "application/json", good, "no such operation"},
		{"GET", "/v1/things", 200, "application/json", good, "no such operation"},
		{"GET", "/v1/things/", 200, "application/json", good, "no such operation"},
	} {
		err := d.CheckResponse(c.method, c.path, c.status, c.ctype, []byte(c.body))
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %s %d %s: %v, want %q", c.method, c.path, c.status, c.body, err, c.want)
		}
	}
}

// A keyword the checks do not understand, or a reference to nothing, is
// refused when the document is read: it cannot say what nobody checks.
func TestParseRefusesWhatItDoesNotUnderstand(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"required: [id, when, tags]", "requierd: [id, when, tags]", "requierd"},
		{`$ref: "#/components/schemas/Size"`, `$ref: "#/components/schemas/Sise"`, "Sise"},
		{"x-ironclaw-role: agent", "x-role: agent", "x-role"},
	} {
		doc := strings.Replace(tiny, c.from, c.to, 1)
		if doc == tiny {
			t.Fatalf("%q is not in the document", c.from)
		}
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("with %q: %v, want an error naming %q", c.to, err, c.want)
		}
	}
}

func TestTypeScriptForms(t *testing.T) {
	d := parseTiny(t)
	ts, err := d.TypeScript()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"export interface Thing {\n  id: string;\n  when: string;\n  tags: string[];\n  count?: number;\n  size?: Size;\n  meta?: Record<string, string>;\n  /** anything */\n  raw?: unknown;\n}\n",
		"export type Size = number | string;\n",
		"export type Frame = {\n    out: string;\n  } | {\n    exit: number;\n  };\n",
	} {
		if !strings.Contains(string(ts), want) {
			t.Errorf("generated:\n%s\nwant it to contain:\n%s", ts, want)
		}
	}
}
