package layering

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// pkg is one package of the module, named by its path in the module
// ("internal/api"), with the packages of ours it imports.
type pkg struct {
	rel   string
	dir   string
	build *build.Package
	// imports and testImports are module-relative paths of our packages:
	// those of the package's own files, and those of its tests (the
	// package itself left out).
	imports, testImports []string
}

var (
	loadOnce sync.Once
	loaded   struct {
		root, module string
		pkgs         []*pkg
		err          error
	}
)

// modulePackages returns every package of the module (as `go list ./...`
// sees them from the root), sorted by path.
func modulePackages(t *testing.T) (module string, pkgs []*pkg) {
	t.Helper()
	loadOnce.Do(func() {
		loaded.root, loaded.module, loaded.err = findModule()
		if loaded.err == nil {
			loaded.pkgs, loaded.err = walk(loaded.root, loaded.module)
		}
	})
	if loaded.err != nil {
		t.Fatal(loaded.err)
	}
	edges, testEdges := 0, 0
	for _, p := range loaded.pkgs {
		edges += len(p.imports)
		testEdges += len(p.testImports)
	}
	if len(loaded.pkgs) < 10 || edges < 30 || testEdges < 30 {
		t.Fatalf("found only %d packages, %d imports and %d test imports of ours under %s: the walk is broken",
			len(loaded.pkgs), edges, testEdges, loaded.root)
	}
	return loaded.module, loaded.pkgs
}

// findModule goes up from the test's directory to go.mod.
func findModule() (root, module string, err error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`), nil
				}
			}
			return "", "", errors.New(filepath.Join(dir, "go.mod") + " has no module line")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// walk finds the packages below root the way the go command's ./...
// does: not in testdata, not in directories named with a leading . or _,
// not in another module; and not in node_modules (the SDK's).
func walk(root, module string) ([]*pkg, error) {
	var out []*pkg
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != root {
			if name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		bp, err := build.Default.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		q := &pkg{rel: rel, dir: p, build: bp}
		q.imports = ours(module, rel, bp.Imports)
		q.testImports = ours(module, rel, append(append([]string(nil), bp.TestImports...), bp.XTestImports...))
		out = append(out, q)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, err
}

// ours keeps the imports inside module, as module-relative paths, sorted,
// without self.
func ours(module, self string, imports []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, imp := range imports {
		rel, ok := strings.CutPrefix(imp, module+"/")
		if !ok || rel == self || seen[rel] {
			continue
		}
		seen[rel] = true
		out = append(out, rel)
	}
	sort.Strings(out)
	return out
}

// match reports whether the module-relative package path p matches
// pattern: "a/b" is that package, "a/b/..." is a/b and every package
// below it.
func match(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if match(pat, p) {
			return true
		}
	}
	return false
}
