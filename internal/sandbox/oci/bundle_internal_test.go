package oci

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
)

// The synthetic /etc's alternatives are written into the directory bound
// at /etc; anything else below the top level is refused.
func TestBundleAlternatives(t *testing.T) {
	spec := sandbox.Spec{}.WithDefaults()
	sl, err := seal.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	etc := rootfs.Etc(spec.Hostname)
	alt := []rootfs.Entry{{Path: rootfs.AlternativesDir, Kind: rootfs.KindDir, Mode: 0o755},
		{Path: rootfs.AlternativesDir + "/awk", Kind: rootfs.KindSymlink, Target: "/usr/bin/mawk"}}
	write := func(root []rootfs.Entry) (bundle, error) {
		s := *sl
		s.Root = root
		b := bundle{dir: filepath.Join(t.TempDir(), "b")}
		return b, writeBundle(b, bundleConfig{id: "oci-x", spec: spec, seal: &s, helperExe: "/bin/true", args: []string{"/bin/true"}})
	}
	b, err := write(slices.Concat(etc, alt))
	if err != nil {
		t.Fatal(err)
	}
	if tg, err := os.Readlink(filepath.Join(b.etc(), "alternatives", "awk")); err != nil || tg != "/usr/bin/mawk" {
		t.Errorf("etc/alternatives/awk: %q %v", tg, err)
	}
	if _, err := os.Lstat(filepath.Join(b.rootfs(), "etc", "alternatives")); err == nil {
		t.Error("the alternatives were written into the rootfs, beneath the /etc bind")
	}
	for _, bad := range [][]rootfs.Entry{
		slices.Concat(etc, []rootfs.Entry{{Path: "/usr/bin/x", Kind: rootfs.KindSymlink, Target: "/usr/bin/mawk"}}),
		slices.Concat(etc, []rootfs.Entry{{Path: "/etc/x", Kind: rootfs.KindDir}}),
		slices.Concat(etc, alt[1:]), // no directory
		slices.Concat(alt, etc),     // before /etc
		slices.Concat(etc, alt, []rootfs.Entry{{Path: rootfs.AlternativesDir + "/cfg", Kind: rootfs.KindSymlink, Target: "/etc/shadow"}}),
		slices.Concat(etc, alt, []rootfs.Entry{{Path: rootfs.AlternativesDir + "/x/y", Kind: rootfs.KindSymlink, Target: "/usr/bin/y"}}),
		slices.Concat(etc, alt, alt[:1]),
	} {
		if _, err := write(bad); err == nil {
			t.Errorf("a bundle was written for %+v", bad[len(bad)-1])
		}
	}
}
