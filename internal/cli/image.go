package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// imageArg is what --image means, for 'run' and 'sandbox create' alike: an
// argument that looks like a path (it starts with /, . or ~, or names
// something that exists here) is a local image, returned as an absolute
// path with ~ expanded, since the daemon does not share our working
// directory; anything else ("ghcr.io/org/app:1", "alpine",
// "localhost:5000/app@sha256:...") is a registry reference, returned as
// it is.
//
// A local image may carry a selector after its last ':' or '@' (an OCI
// layout's tag or digest, "dir:tag", "dir@sha256:..."; a docker-save
// tarball's image, "app.tar:repo:tag"); making the path absolute keeps it.
func imageArg(ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	if !strings.HasPrefix(ref, "/") && !strings.HasPrefix(ref, ".") && !strings.HasPrefix(ref, "~") && !existsLocally(ref) {
		return ref, nil
	}
	p, err := expandHome(ref)
	if err == nil {
		p, err = filepath.Abs(p)
	}
	if err != nil {
		return "", fmt.Errorf("--image %s: %w", ref, err)
	}
	return p, nil
}

// existsLocally reports whether a reference that does not start like a
// path names something here, whole or before a selector ("app.tar",
// "layout:tag", "app.tar:ghcr.io/org/app:1"): a local file or directory
// wins over a registry name.
func existsLocally(ref string) bool {
	if _, err := os.Stat(ref); err == nil {
		return true
	}
	for i := range len(ref) {
		if ref[i] != ':' && ref[i] != '@' || i == 0 {
			continue
		}
		if _, err := os.Stat(ref[:i]); err == nil {
			return true
		}
	}
	return false
}

// expandHome expands a leading "~" or "~/" to the home directory; "~user"
// is refused rather than guessed at.
func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		if strings.HasPrefix(p, "~") {
			return "", fmt.Errorf("only ~ and ~/ are expanded, not ~user")
		}
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, p[1:]), nil
}
