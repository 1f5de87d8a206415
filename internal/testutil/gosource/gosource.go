// Package gosource reads Go source for the tests that check the source
// itself: which types a package declares, which error codes it spells,
// its doc comment, what it imports. It selects a package's files the way
// the go command does for this platform (build constraints, _linux.go
// names, CGO_ENABLED), which the deprecated parser.ParseDir does not.
//
// Tests only; the functions fail the test on any error.
package gosource

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// Package is what the go command would build in dir for this platform
// (build.Default): its name, its files and its imports (the package's own
// and its tests'). A directory without Go files fails the test.
func Package(t testing.TB, dir string) *build.Package {
	t.Helper()
	p, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		t.Fatalf("gosource: %s: %v", dir, err)
	}
	return p
}

// Files parses the non-test files of the package in dir with mode, in the
// order of their names. The file set gives their positions.
func Files(t testing.TB, dir string, mode parser.Mode) (*token.FileSet, []*ast.File) {
	t.Helper()
	p := Package(t, dir)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, mode)
		if err != nil {
			t.Fatalf("gosource: %v", err)
		}
		files = append(files, f)
	}
	return fset, files
}
