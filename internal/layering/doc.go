// Package layering holds no code the binary uses: its tests keep the
// repository's shape, so that a reviewer does not have to.
//
//   - imports_test.go: the import rules of docs/architecture.md
//     ("Layering"), written as data: which packages may import which, by
//     package path patterns. A moved package changes only patterns; a
//     pattern that matches no package fails the test, so a rule cannot go
//     stale silently.
//   - pkgdoc_test.go: every package has exactly one package doc comment,
//     in the form "Package x ..." ("Command x ..." for a main package).
//
// Both read the source as the go command selects it for this platform
// (package gosource); they need no network and no build.
package layering
