package docker

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
// at /etc, never into the image; anything else below the top level is
// refused.
func TestPrepareAlternatives(t *testing.T) {
	spec := sandbox.Spec{}.WithDefaults()
	sl, err := seal.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	etc := rootfs.Etc(spec.Hostname)
	alt := []rootfs.Entry{{Path: rootfs.AlternativesDir, Kind: rootfs.KindDir, Mode: 0o755},
		{Path: rootfs.AlternativesDir + "/awk", Kind: rootfs.KindSymlink, Target: "/usr/bin/mawk"}}
	top := rootfs.Entry{Path: "/bin", Kind: rootfs.KindSymlink, Target: "usr/bin"}
	prep := func(root []rootfs.Entry) (state, plan, error) {
		s := *sl
		s.Root = root
		st := state{dir: filepath.Join(t.TempDir(), "s")}
		p, err := prepare(st, spec, &s, "/bin/true")
		return st, p, err
	}
	s, p, err := prep(slices.Concat([]rootfs.Entry{top}, etc, alt))
	if err != nil {
		t.Fatal(err)
	}
	if tg, err := os.Readlink(filepath.Join(s.etc(), "alternatives", "awk")); err != nil || tg != "/usr/bin/mawk" {
		t.Errorf("etc/alternatives/awk: %q %v", tg, err)
	}
	if !slices.Equal(p.symlinks, []rootfs.Entry{top}) {
		t.Errorf("the image's symlinks are %+v, want only the top-level %+v", p.symlinks, top)
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
		if _, _, err := prep(bad); err == nil {
			t.Errorf("prepared a root with %+v", bad[len(bad)-1])
		}
	}
}
