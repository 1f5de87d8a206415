package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/errdefs"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"4096", 4096, false},
		{"64k", 64 << 10, false},
		{"256M", 256 << 20, false},
		{"256MiB", 256 << 20, false},
		{"256mb", 256 << 20, false},
		{"256Mi", 256 << 20, false},
		{"1.5G", 3 << 29, false},
		{"2T", 2 << 40, false},
		{"10B", 10, false},
		{" 1G ", 1 << 30, false},
		{"", 0, true},
		{"12X", 0, true},
		{"M", 0, true},
		{"-1M", 0, true},
		{"1e400", 0, true},
		{"NaN", 0, true},
		{"12iB", 0, true},
		{"99999999T", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseBytes(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{512: "512B", 1 << 20: "1MiB", 3 << 29: "1.5GiB", 4 << 20: "4MiB"} {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("default spec: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"unknown root kind", func(s *Spec) { s.Root.Kind = "oci" }, "unknown kind"},
		{"relative image", func(s *Spec) { s.Root = Root{Kind: RootDirectory, Path: "img"} }, "absolute"},
		{"path with host view", func(s *Spec) { s.Root.Path = "/x" }, "only allowed"},
		{"bad env", func(s *Spec) { s.Env = []string{"A"} }, "KEY=VALUE"},
		{"bad env key", func(s *Spec) { s.Env = []string{"A-B=1"} }, "variable name"},
		{"nul in env", func(s *Spec) { s.Env = []string{"A=\x00"} }, "NUL"},
		{"relative cwd", func(s *Spec) { s.Cwd = "work" }, "cwd"},
		{"unclean cwd", func(s *Spec) { s.Cwd = "/workspace/../etc" }, "cwd"},
		{"bad hostname", func(s *Spec) { s.Hostname = "-bad" }, "hostname"},
		{"relative workspace", func(s *Spec) { s.Workspace = "ws" }, "workspace"},
		{"mount over proc", func(s *Spec) { s.Mounts = []Mount{{Source: "/etc", Target: "/proc/x"}} }, "reserved"},
		{"mount over usr", func(s *Spec) { s.Mounts = []Mount{{Source: "/etc", Target: "/usr"}} }, "reserved"},
		{"nested mount", func(s *Spec) { s.Mounts = []Mount{{Source: "/etc", Target: "/data/x"}} }, "top-level"},
		{"relative source", func(s *Spec) { s.Mounts = []Mount{{Source: "etc", Target: "/data"}} }, "absolute"},
		{"too many mounts", func(s *Spec) { s.Mounts = make([]Mount, MaxMounts+1) }, "allowed"},
		{"port 0", func(s *Spec) { s.Network.LoopbackTCP = []uint16{0} }, "port 0"},
		{"memory too small", func(s *Spec) { s.Limits.MemoryBytes = 1 << 20 }, "minimum"},
		{"memory too large", func(s *Spec) { s.Limits.MemoryBytes = 1 << 50 }, "maximum"},
		{"negative pids", func(s *Spec) { s.Limits.Pids = -1 }, "positive"},
		{"timeout too long", func(s *Spec) { s.Limits.Timeout = 48 * time.Hour }, "maximum"},
		{"tiny cpu", func(s *Spec) { s.Limits.CPUs = 0.001 }, "minimum"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{}.WithDefaults()
			tc.mutate(&s)
			err := s.Validate()
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidSpec mentioning %q", err, tc.want)
			}
		})
	}
	good := Spec{Mounts: []Mount{{Source: "/etc", Target: "/data"}, {Source: "/etc", Target: "/workspace/etc", ReadOnly: true}}}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("good mounts: %v", err)
	}
}

// A tmpfs as large as the memory limit lets a full /workspace take the
// memory every process needs, pid 1's included: the areas must fit the
// memory limit with room to spare, defaults shrink to fit, and a request
// that cannot fit is refused before anything is created.
func TestHostileLimitsTmpfsMustFitMemory(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name          string
		in            Limits
		hostWorkspace bool
		ws, tmp       int64 // after WithDefaults
		wantErr       string
	}{
		{name: "defaults", ws: 256 * mi, tmp: 128 * mi},
		{name: "small memory shrinks both", in: Limits{MemoryBytes: 64 * mi}, ws: 32 * mi, tmp: 16 * mi},
		{name: "large memory keeps the defaults", in: Limits{MemoryBytes: 4 << 30}, ws: 256 * mi, tmp: 128 * mi},
		{name: "explicit workspace, tmp takes the rest", in: Limits{MemoryBytes: 512 * mi, WorkspaceBytes: 300 * mi}, ws: 300 * mi, tmp: 84 * mi},
		{name: "explicit tmp, workspace takes the rest", in: Limits{MemoryBytes: 128 * mi, TmpBytes: 32 * mi}, ws: 64 * mi, tmp: 32 * mi},
		{name: "host workspace takes no budget", in: Limits{MemoryBytes: 64 * mi, TmpBytes: 48 * mi}, hostWorkspace: true, ws: 256 * mi, tmp: 48 * mi},
		{name: "explicit sizes that fit exactly", in: Limits{MemoryBytes: 512 * mi, WorkspaceBytes: 256 * mi, TmpBytes: 128 * mi}, ws: 256 * mi, tmp: 128 * mi},
		{name: "the old defaults no longer fit", in: Limits{MemoryBytes: 512 * mi, WorkspaceBytes: 512 * mi, TmpBytes: 256 * mi},
			ws: 512 * mi, tmp: 256 * mi, wantErr: "workspace size 512MiB and tmp size 256MiB do not fit in memory 512MiB"},
		{name: "workspace as large as memory", in: Limits{MemoryBytes: 1 << 30, WorkspaceBytes: 1 << 30},
			ws: 1 << 30, wantErr: "leaves no room for /tmp"},
		{name: "tmp over budget with a host workspace", in: Limits{MemoryBytes: 64 * mi, TmpBytes: 60 * mi}, hostWorkspace: true,
			ws: 256 * mi, tmp: 60 * mi, wantErr: "tmp size 60MiB does not fit in memory 64MiB"},
		{name: "huge workspace", in: Limits{MemoryBytes: 8 << 30, WorkspaceBytes: 200 << 30, TmpBytes: 1 * mi},
			ws: 200 << 30, tmp: 1 * mi, wantErr: "at most 6GiB of tmpfs fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Limits: tc.in}
			if tc.hostWorkspace {
				s.Workspace = "/srv/ws"
			}
			s = s.WithDefaults()
			if s.Limits.WorkspaceBytes != tc.ws || s.Limits.TmpBytes != tc.tmp {
				t.Errorf("WithDefaults: workspace %s tmp %s, want %s and %s", FormatBytes(s.Limits.WorkspaceBytes),
					FormatBytes(s.Limits.TmpBytes), FormatBytes(tc.ws), FormatBytes(tc.tmp))
			}
			err := s.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v", err)
			case tc.wantErr != "" && (!errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate() = %v, want ErrInvalidSpec saying %q", err, tc.wantErr)
			}
			if err == nil {
				if got := s.Limits.TmpBytes + s.Limits.WorkspaceBytes; !tc.hostWorkspace && got > TmpfsBudget(s.Limits.MemoryBytes) {
					t.Fatalf("accepted %s of tmpfs in memory %s", FormatBytes(got), FormatBytes(s.Limits.MemoryBytes))
				}
			}
		})
	}
	if got := TmpfsBudget(DefaultLimits.MemoryBytes); got != DefaultLimits.WorkspaceBytes+DefaultLimits.TmpBytes {
		t.Errorf("the default tmpfs sizes (%s) do not use the default memory's budget %s", FormatBytes(DefaultLimits.WorkspaceBytes+DefaultLimits.TmpBytes), FormatBytes(got))
	}
}

func TestHostExhausted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string // "" = not exhaustion
	}{
		{fmt.Errorf("fork/exec x: %w", syscall.EAGAIN), "out of resources (processes or threads): starting: fork/exec x: resource temporarily unavailable"},
		{syscall.ENOMEM, "(memory)"},
		{syscall.EMFILE, "(file descriptors)"},
		{syscall.ENFILE, "(file descriptors)"},
		{syscall.ENOSPC, "(space"},
		{syscall.EPERM, ""},
		{errors.New("resource temporarily unavailable"), ""}, // text is not an errno
		{nil, ""},
	} {
		err := HostExhausted("starting", tc.err)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("HostExhausted(%v) = %v, want nil", tc.err, err)
		case tc.want != "" && (!errors.Is(err, ErrHostExhausted) || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("HostExhausted(%v) = %v, want ErrHostExhausted saying %q", tc.err, err, tc.want)
		}
	}
	if err := HostExhaustedText("runc run", "runc create failed: fork/exec /proc/self/exe: Resource temporarily unavailable"); !errors.Is(err, ErrHostExhausted) ||
		!strings.Contains(err.Error(), "processes") {
		t.Errorf("HostExhaustedText: %v", err)
	}
	if err := HostExhaustedText("runc run", "permission denied"); err != nil {
		t.Errorf("HostExhaustedText(permission denied) = %v", err)
	}
}

// A memory limit below the minimum is reported as such, not as the tmpfs
// sizes that follow from it.
func TestTinyMemorySaysMemory(t *testing.T) {
	for _, l := range []Limits{{MemoryBytes: 1 << 20}, {MemoryBytes: 1 << 20, WorkspaceBytes: 1 << 20}} {
		err := Spec{Limits: l}.WithDefaults().Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "memory 1MiB is below the 8MiB minimum") {
			t.Errorf("%+v: %v", l, err)
		}
	}
	if err := (Spec{Limits: Limits{MemoryBytes: 8 << 20}}).WithDefaults().Validate(); err != nil {
		t.Errorf("the smallest memory limit: %v", err)
	}
}

func TestLimitsChanged(t *testing.T) {
	base := Limits{MemoryBytes: 1 << 30, Pids: 100, CPUs: 1, Timeout: time.Minute, OutputBytes: 1 << 20,
		WorkspaceBytes: 1 << 28, TmpBytes: 1 << 26, OpenFiles: 256}
	got := base.Changed(Limits{Pids: 200, Timeout: 2 * time.Minute, WorkspaceBytes: 1, TmpBytes: 1, OpenFiles: 1})
	want := base
	want.Pids, want.Timeout = 200, 2*time.Minute // the sizes fixed at create stay
	if got != want {
		t.Fatalf("Changed = %+v, want %+v", got, want)
	}
	if got := base.Changed(Limits{}); got != base {
		t.Fatalf("an empty change changed %+v into %+v", base, got)
	}
}
