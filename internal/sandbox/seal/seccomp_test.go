package seal

import (
	"slices"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/seccomp"
)

// The OCI profile restates internal/seccomp's filter (which the native
// init installs); these checks fail
// when the two drift apart.
func TestProfileMatchesFilter(t *testing.T) {
	p, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ALLOW" || len(p.Architectures) != 1 {
		t.Fatalf("default %s, architectures %v", p.DefaultAction, p.Architectures)
	}
	unconditional := map[string]string{}
	conditional := map[string]bool{}
	for _, s := range p.Syscalls {
		for _, n := range s.Names {
			if len(s.Args) > 0 {
				conditional[n] = true
				continue
			}
			errno := "?"
			if s.ErrnoRet != nil {
				errno = map[uint]string{1: "EPERM", 38: "ENOSYS"}[*s.ErrnoRet]
			}
			unconditional[n] = errno
		}
	}
	for _, name := range seccomp.Denied() {
		want := "EPERM"
		if name == "clone3" {
			want = "ENOSYS"
		}
		if got := unconditional[name]; got != want {
			t.Errorf("%s: profile says %q, native filter %s", name, got, want)
		}
	}
	if len(unconditional) != len(seccomp.Denied()) {
		t.Errorf("profile denies %d calls outright, native filter %d", len(unconditional), len(seccomp.Denied()))
	}
	var native []string
	for _, r := range seccomp.Restricted() {
		name, _, _ := strings.Cut(r, ":")
		native = append(native, name)
	}
	slices.Sort(native)
	var ours []string
	for n := range conditional {
		ours = append(ours, n)
	}
	slices.Sort(ours)
	if !slices.Equal(native, ours) || !slices.Equal(ours, restrictedNames) {
		t.Errorf("argument rules cover %v, native filter %v, restrictedNames %v", ours, native, restrictedNames)
	}
}
