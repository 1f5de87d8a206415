// Command tsgen writes the TypeScript SDK's wire types
// (sdk/typescript/src/wire.ts) from the API's description
// (api/openapi.yaml). Run it from anywhere in the repository:
//
//	go run ./internal/api/openapi/tsgen        (or go generate ./internal/api/openapi)
//
// With -check it writes nothing and fails when the file is not what it
// would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/api/openapi"
)

// Out is the generated file's place in the repository.
const Out = "sdk/typescript/src/wire.ts"

func main() {
	check := flag.Bool("check", false, "fail if "+Out+" is not up to date instead of writing it")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "tsgen:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	root, err := openapi.RepoRoot(".")
	if err != nil {
		return err
	}
	doc, err := openapi.Load(filepath.Join(root, openapi.Path))
	if err != nil {
		return err
	}
	ts, err := doc.TypeScript()
	if err != nil {
		return err
	}
	out := filepath.Join(root, Out)
	if check {
		have, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		if !bytes.Equal(have, ts) {
			return fmt.Errorf("%s is not generated from %s: run go run ./internal/api/openapi/tsgen", Out, openapi.Path)
		}
		return nil
	}
	return os.WriteFile(out, ts, 0o644)
}
