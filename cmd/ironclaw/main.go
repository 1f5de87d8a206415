// Command ironclaw runs AI-agent tool calls inside sealed sandboxes.
package main

import (
	"os"

	"github.com/ironclaw/ironclaw/internal/cli"
	"github.com/ironclaw/ironclaw/internal/sandbox/native/boot"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci/helper"
)

func main() {
	if boot.IsInit() {
		boot.Main() // the sandbox's pid 1; never returns
	}
	if helper.IsHelper() {
		helper.Main() // inside an OCI sandbox: agent, exec front, file ops; never returns
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
