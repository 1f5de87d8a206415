package backend

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// InitExeName is the small in-sandbox binary (cmd/ironclaw-sandbox) that
// backends run as every sandbox's init when it is found beside the running
// executable. Without it they re-execute the running executable, whose
// start runs the initialisers of everything the daemon links.
const InitExeName = "ironclaw-sandbox"

// StewardExeName is the native backend's small pid 1 (inside/steward's
// C program), which make build puts beside InitExeName.
const StewardExeName = "ironclaw-steward"

// StewardExe finds the steward beside the init binary initExe (or beside
// the running executable when initExe is ""), and says why not when there
// is none; native.New checks it speaks this build's protocol. Without it
// sandboxes keep the Go init as pid 1, which works, only with more memory
// and threads each.
func StewardExe(initExe string) (path string, why string) {
	dir := filepath.Dir(initExe)
	if initExe == "" {
		self, err := resolvedSelf()
		if err != nil {
			return "", fmt.Sprintf("finding this executable: %v", err)
		}
		dir = filepath.Dir(self)
	}
	path = filepath.Join(dir, StewardExeName)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Sprintf("no %s in %s", StewardExeName, dir)
	}
	return path, ""
}

// InitExe finds the binary backends should run inside sandboxes when no
// Options.Exe is given: InitExeName in the directory of the running
// executable (after symlinks), if it is a static ELF executable that names
// the same build as this one (buildIdentity). It returns "" (use this
// executable) and why not when there is none or it does not fit; a caller
// logs the reason, since the fallback works, only slower.
func InitExe() (path string, why string) {
	self, err := resolvedSelf()
	if err != nil {
		return "", fmt.Sprintf("finding this executable: %v", err)
	}
	path = filepath.Join(filepath.Dir(self), InitExeName)
	if err := checkInitExe(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Sprintf("no %s beside %s", InitExeName, self)
		}
		return "", err.Error()
	}
	return path, ""
}

// resolvedSelf is the running executable, after symlinks.
func resolvedSelf() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	return self, nil
}

// checkInitExe says why path cannot be this build's init, or nil.
func checkInitExe(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	if err := checkStatic(path); err != nil {
		return err
	}
	// The build is read from the file, not by running it: Open is on the
	// path of every `ironclaw run`.
	theirs, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s holds no Go build information: %v", path, err)
	}
	ours, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("this executable holds no Go build information to compare with")
	}
	if got, want := buildIdentity(theirs), buildIdentity(ours); got != want {
		return fmt.Errorf("%s is from another build (%s; this is %s): build both with `make build`", path, got, want)
	}
	return nil
}

// checkStatic refuses a dynamically linked init: sandboxes hold no host
// libraries to load, and the native init must seal every one of its
// threads, which a cgo runtime's threads escape.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (built with cgo?): build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// buildIdentity names the build bi describes: the main module's path and
// version, the VCS revision, its time and whether the tree was modified,
// the architecture and the Go version; not cgo, since a daemon built with
// cgo needs a cgo-free init beside it. The wire protocol between the daemon
// and the init has no version of its own: it is whatever both were built
// from, so they must be one build. Two builds of one modified tree name
// the same identity; `make build` builds both binaries together.
func buildIdentity(bi *debug.BuildInfo) string {
	var b strings.Builder
	b.WriteString(bi.GoVersion + " " + bi.Main.Path + "@" + bi.Main.Version)
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision", "vcs.time", "vcs.modified", "GOARCH":
			b.WriteString(" " + s.Key + "=" + s.Value)
		}
	}
	return b.String()
}
