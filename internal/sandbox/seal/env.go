package seal

import (
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// DefaultPATH is the PATH every backend gives commands; gated names are
// looked up in it (package gate).
const DefaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BaseEnv is what every command sees before the Spec's and the request's
// own variables, on every backend. Nothing of the daemon's environment is
// ever passed in.
var BaseEnv = []string{
	"PATH=" + DefaultPATH,
	"HOME=" + sandbox.WorkspaceDir,
	"USER=sandbox",
	"LOGNAME=sandbox",
	"SHELL=/bin/sh",
	"LANG=C.UTF-8",
	"TMPDIR=" + sandbox.TmpDir,
}

// MergeEnv joins "KEY=VALUE" layers; a later layer's key replaces an
// earlier one's in place.
func MergeEnv(layers ...[]string) []string {
	idx := map[string]int{}
	var out []string
	for _, l := range layers {
		for _, kv := range l {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}
