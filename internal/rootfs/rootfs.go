// Package rootfs plans a sandbox's root filesystem: which top-level entries
// it has and where each comes from. It only reads the host; the sandbox's
// init applies the plan inside its own mount namespace.
//
// Two roots exist today:
//   - the host-toolchain view: read-only binds of the host's /usr, /bin,
//     /sbin and /lib* (or symlinks, where the host merged them into /usr)
//     and a synthetic /etc written from scratch, with the host's
//     alternatives links the exposed programs go through (see
//     Alternative). Nothing else of the host is visible: no /home, /root,
//     /var, /run, sockets or the rest of the host's /etc.
//   - a directory: every top-level entry of a host directory, read-only.
//
// Either way the sandbox adds its own /proc, /dev, /workspace and /tmp.
package rootfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kind says how an Entry is made.
type Kind string

const (
	KindBindDir  Kind = "bind-dir"  // read-only bind of a host directory
	KindBindFile Kind = "bind-file" // read-only bind of a host file
	KindSymlink  Kind = "symlink"   // a symlink with Target
	KindDir      Kind = "dir"       // an empty directory
	KindFile     Kind = "file"      // a file holding Content
)

// Entry is one path in the new root.
type Entry struct {
	Path    string `json:"path"` // absolute, inside the sandbox
	Kind    Kind   `json:"kind"`
	Source  string `json:"source,omitempty"`  // host path, for binds
	Target  string `json:"target,omitempty"`  // for symlinks
	Content string `json:"content,omitempty"` // for files
	Mode    uint32 `json:"mode,omitempty"`    // for files and dirs
}

// MaskDir is the top-level name the native root reserves for the empty
// directory its masked directories show (internal/sandbox/setup), made and
// removed before the sandbox starts.
const MaskDir = ".ironclaw-masked"

// Provided are the top-level names the sandbox always makes itself; a plan
// never takes them from the host or an image (Check refuses them).
var provided = map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "workspace": true, MaskDir: true}

// hostViewDirs are the host directories the host-toolchain view exposes.
var hostViewDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// HostView plans the host-toolchain view rooted at hostRoot (normally "/").
// Its alternatives are scanned once per host root and revalidated with a
// few stats (see alternatives.go).
func HostView(hostRoot, hostname string) ([]Entry, error) {
	alts := alternatives(hostRoot)
	out := make([]Entry, 0, len(hostViewDirs)+16+len(alts))
	for _, name := range hostViewDirs {
		p := filepath.Join(hostRoot, name)
		e, ok, err := entryFor(p, "/"+name, false)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	if len(out) == 0 || out[0].Path != "/usr" {
		return nil, fmt.Errorf("rootfs: host has no /usr directory to expose")
	}
	out = append(out, Etc(hostname)...)
	out = append(out, alts...)
	return out, nil
}

// Directory plans a root made of the top-level entries of dir.
func Directory(dir string) ([]Entry, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("rootfs: image directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("rootfs: image %s is not a directory", dir)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rootfs: image directory: %w", err)
	}
	var out []Entry
	for _, de := range des {
		if provided[de.Name()] {
			continue
		}
		e, ok, err := entryFor(filepath.Join(dir, de.Name()), "/"+de.Name(), true)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// entryFor maps one host path to an entry; special files (sockets, devices,
// fifos) are never exposed.
func entryFor(hostPath, inside string, allowFiles bool) (Entry, bool, error) {
	fi, err := os.Lstat(hostPath)
	if os.IsNotExist(err) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("rootfs: %w", err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		t, err := os.Readlink(hostPath)
		if err != nil {
			return Entry{}, false, fmt.Errorf("rootfs: %w", err)
		}
		return Entry{Path: inside, Kind: KindSymlink, Target: t}, true, nil
	case fi.IsDir():
		return Entry{Path: inside, Kind: KindBindDir, Source: hostPath}, true, nil
	case fi.Mode().IsRegular() && allowFiles:
		return Entry{Path: inside, Kind: KindBindFile, Source: hostPath}, true, nil
	}
	return Entry{}, false, nil
}

// Etc is the synthetic /etc of the host-toolchain view: just enough for
// libc, shells and language runtimes to resolve the sandbox user and
// localhost. Nothing is copied from the host's /etc.
func Etc(hostname string) []Entry {
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"sandbox:x:65532:65532:IronClaw sandbox:/workspace:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":         "root:x:0:\nsandbox:x:65532:\nnogroup:x:65534:\n",
		"hosts":         "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"hostname":      hostname + "\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n",
		// No name server: DNS fails fast instead of timing out.
		"resolv.conf": "# no DNS inside an IronClaw sandbox\noptions attempts:1 timeout:1\n",
		"shells":      "/bin/sh\n/bin/bash\n",
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []Entry{{Path: "/etc", Kind: KindDir, Mode: 0o755}}
	for _, n := range names {
		out = append(out, Entry{Path: "/etc/" + n, Kind: KindFile, Content: files[n], Mode: 0o644})
	}
	return out
}

// The host view's link to the sandbox's trust bundle (the host's roots
// and the daemon's egress CA; package seal adds it when a spec has trust
// files): the system bundle's usual path, in directories of the
// synthetic /etc.
const (
	SSLDir       = "/etc/ssl"
	SSLCertsDir  = "/etc/ssl/certs"
	SystemBundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Check rejects plans whose paths could escape the new root, and any
// entry below the top level but the synthetic /etc's: /etc a KindDir, its
// files (/etc/NAME, KindFile), and the alternatives (AlternativesDir a
// KindDir after /etc, then at most MaxAlternatives links that Alternative
// accepts).
func Check(entries []Entry) error {
	seenEtc, etc, alt, nAlt := false, false, false, 0
	ssl, certs, bundle := false, false, false
	for _, e := range entries {
		if !strings.HasPrefix(e.Path, "/") || filepath.Clean(e.Path) != e.Path || e.Path == "/" {
			return fmt.Errorf("rootfs: bad path %q", e.Path)
		}
		switch e.Kind {
		case KindBindDir, KindBindFile:
			if !filepath.IsAbs(e.Source) {
				return fmt.Errorf("rootfs: %s: source %q is not absolute", e.Path, e.Source)
			}
		case KindSymlink, KindDir, KindFile:
		default:
			return fmt.Errorf("rootfs: %s: unknown kind %q", e.Path, e.Kind)
		}
		dir, name := filepath.Split(e.Path)
		switch {
		case dir == "/":
			if name == MaskDir {
				return fmt.Errorf("rootfs: %s is the sandbox's own", e.Path)
			}
			if e.Path == "/etc" {
				if seenEtc {
					return fmt.Errorf("rootfs: /etc twice")
				}
				seenEtc, etc = true, e.Kind == KindDir
			}
		case e.Path == AlternativesDir:
			if !etc || alt || e.Kind != KindDir {
				return fmt.Errorf("rootfs: %s: only a directory in the synthetic /etc", e.Path)
			}
			alt = true
		case e.Path == SSLDir:
			if !etc || ssl || e.Kind != KindDir {
				return fmt.Errorf("rootfs: %s: only a directory of the synthetic /etc, once", e.Path)
			}
			ssl = true
		case e.Path == SSLCertsDir:
			if !ssl || certs || e.Kind != KindDir {
				return fmt.Errorf("rootfs: %s: only a directory after %s, once", e.Path, SSLDir)
			}
			certs = true
		case e.Path == SystemBundle:
			if !certs || bundle || e.Kind != KindSymlink || !filepath.IsAbs(e.Target) || filepath.Clean(e.Target) != e.Target {
				return fmt.Errorf("rootfs: %s: only a link to an absolute clean path (the trust bundle), once", e.Path)
			}
			bundle = true
		case dir == "/etc/":
			if !etc || e.Kind != KindFile || !plainName(name) {
				return fmt.Errorf("rootfs: %s: only files of the synthetic /etc lie below the top level", e.Path)
			}
		case dir == AlternativesDir+"/":
			if _, ok := Alternative(e); !alt || !ok {
				return fmt.Errorf("rootfs: %s: not an alternatives link into the view (target %q)", e.Path, e.Target)
			}
			if nAlt++; nAlt > MaxAlternatives {
				return fmt.Errorf("rootfs: more than %d alternatives links", MaxAlternatives)
			}
		default:
			return fmt.Errorf("rootfs: %s: only top-level entries and the synthetic /etc's make a root", e.Path)
		}
	}
	return nil
}
