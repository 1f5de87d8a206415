package layering

import (
	"go/parser"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/testutil/gosource"
)

// Every package says what it is for, once: exactly one of its files has a
// doc comment on its package clause, and it reads "Package x ..." ("Command
// x ..." for a main package, x its directory), the form go doc shows.
// Test-only directories (no non-test files) need none.
func TestEveryPackageHasOneDocComment(t *testing.T) {
	_, pkgs := modulePackages(t)
	for _, p := range pkgs {
		if len(p.build.GoFiles) == 0 {
			continue
		}
		if problem := docProblem(t, p); problem != "" {
			t.Errorf("%s: %s", p.rel, problem)
		}
	}
}

// docProblem is what is wrong with p's package doc comment, or "".
func docProblem(t *testing.T, p *pkg) string {
	fset, files := gosource.Files(t, p.dir, parser.PackageClauseOnly|parser.ParseComments)
	var docs []string
	var text string
	for _, f := range files {
		if f.Doc != nil {
			docs = append(docs, filepath.Base(fset.File(f.Pos()).Name()))
			text = f.Doc.Text()
		}
	}
	switch {
	case len(docs) == 0:
		return "no package doc comment: add one (usually in doc.go or the package's main file) that says what the package is for"
	case len(docs) > 1:
		return "package doc comments in " + strings.Join(docs, ", ") + ": keep one, so go doc shows all of it"
	}
	want := "Package " + p.build.Name + " "
	if p.build.Name == "main" {
		want = "Command " + filepath.Base(p.dir) + " "
	}
	if !strings.HasPrefix(text, want) {
		first, _, _ := strings.Cut(text, "\n")
		return "the doc comment in " + docs[0] + " starts " + strings.TrimSpace(first) + "; want " + strings.TrimSpace(want) + " ..."
	}
	return ""
}

// The check catches each way a doc comment goes wrong.
func TestDocCheckCatchesMissingAndMisplacedDocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		bad   bool
	}{
		{"good", map[string]string{"a.go": "// Package x does one thing.\npackage x\n", "b.go": "package x\n"}, false},
		{"good main", map[string]string{"a.go": "// Command x runs.\npackage main\n"}, false},
		{"none", map[string]string{"a.go": "package x\n", "b.go": "// A comment, not the doc.\n\npackage x\n"}, true},
		{"two", map[string]string{"a.go": "// Package x does one thing.\npackage x\n", "b.go": "// Package x does another.\npackage x\n"}, true},
		{"wrong form", map[string]string{"a.go": "// This package does one thing.\npackage x\n"}, true},
		{"wrong name", map[string]string{"a.go": "// Package y does one thing.\npackage x\n"}, true},
		{"main as package", map[string]string{"a.go": "// Package main runs.\npackage main\n"}, true},
		{"only in a test file", map[string]string{"a.go": "package x\n", "a_test.go": "// Package x does one thing.\npackage x\n"}, true},
	} {
		dir := filepath.Join(t.TempDir(), "x")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, src := range tc.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p := &pkg{rel: "x", dir: dir, build: gosource.Package(t, dir)}
		if got := docProblem(t, p); (got != "") != tc.bad {
			t.Errorf("%s: docProblem = %q, want a problem: %v", tc.name, got, tc.bad)
		}
	}
}
