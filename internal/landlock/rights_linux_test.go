package landlock

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestRightsPerABI(t *testing.T) {
	const (
		refer    = unix.LANDLOCK_ACCESS_FS_REFER
		truncate = unix.LANDLOCK_ACCESS_FS_TRUNCATE
		ioctl    = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
		tcp      = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		scopes   = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	)
	tests := []struct {
		abi            int
		fs, net, scope uint64
		attrSize       uintptr
	}{
		{0, 0, 0, 0, 8},
		{1, 0x1fff, 0, 0, 8},
		{2, 0x1fff | refer, 0, 0, 8},
		{3, 0x1fff | refer | truncate, 0, 0, 8},
		{4, 0x1fff | refer | truncate, tcp, 0, 16},
		{5, 0x1fff | refer | truncate | ioctl, tcp, 0, 16},
		{6, 0x1fff | refer | truncate | ioctl, tcp, scopes, 24},
		{7, 0x1fff | refer | truncate | ioctl, tcp, scopes, 24},
		{8, 0x1fff | refer | truncate | ioctl, tcp, scopes, 24},
	}
	for _, tc := range tests {
		t.Run("ABI "+strconv.Itoa(tc.abi), func(t *testing.T) {
			if got := fsRights(tc.abi); got != tc.fs {
				t.Errorf("fsRights = %#x, want %#x", got, tc.fs)
			}
			if got := netRights(tc.abi); got != tc.net {
				t.Errorf("netRights = %#x, want %#x", got, tc.net)
			}
			if got := scopeRights(tc.abi); got != tc.scope {
				t.Errorf("scopeRights = %#x, want %#x", got, tc.scope)
			}
			if got := rulesetAttrSize(tc.abi); got != tc.attrSize {
				t.Errorf("rulesetAttrSize = %d, want %d", got, tc.attrSize)
			}
		})
	}
}

func TestRulesetAttrLayout(t *testing.T) {
	// rulesetAttrSize assumes the x/sys struct starts with the three fields
	// of struct landlock_ruleset_attr, 8 bytes each, in kernel order.
	var a unix.LandlockRulesetAttr
	offsets := []struct {
		name      string
		got, want uintptr
	}{
		{"handled_access_fs", unsafe.Offsetof(a.Handled_access_fs), 0},
		{"handled_access_net", unsafe.Offsetof(a.Handled_access_net), 8},
		{"scoped", unsafe.Offsetof(a.Scoped), 16},
	}
	for _, o := range offsets {
		if o.got != o.want {
			t.Errorf("offset of %s = %d, want %d", o.name, o.got, o.want)
		}
	}
}

func TestPathGrant(t *testing.T) {
	all := fsRights(maxKnownABI)
	tests := []struct {
		name    string
		want    uint64
		handled uint64
		isDir   bool
		grant   uint64
	}{
		{"read-exec dir", grantReadExec, all, true, grantReadExec},
		{"read-exec file drops READ_DIR", grantReadExec, all, false,
			unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{"read-write dir is everything handled", grantReadWrite, all, true, all},
		{"read-write file keeps only file rights", grantReadWrite, all, false, fileRights},
		{"read-write file on ABI 1", grantReadWrite, fsRights(1), false,
			unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{"device file", grantDevice, all, false,
			unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV},
		{"device file before ABI 5", grantDevice, fsRights(4), false,
			unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE},
		{"device dir", grantDevice, all, true, grantDevice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pathGrant(tc.want, tc.handled, tc.isDir); got != tc.grant {
				t.Errorf("pathGrant = %#x, want %#x", got, tc.grant)
			}
		})
	}
}

func TestLimitations(t *testing.T) {
	scoped := Rules{ScopeSignals: true, ScopeAbstractUnix: true}
	tests := []struct {
		name    string
		abi     int
		rules   Rules
		want    []string
		notWant []string
	}{
		{"ABI 1", 1, scoped, []string{"REFER", "truncate", "ABI 4 (kernel 6.7)", "ioctl", "abstract unix", "signal scoping"}, nil},
		{"ABI 3", 3, Rules{}, []string{"ABI 4 (kernel 6.7)", "ioctl"}, []string{"REFER", "truncate", "scoping"}},
		{"ABI 5 with scopes", 5, scoped, []string{"abstract unix", "signal scoping"}, []string{"tcp", "ioctl"}},
		{"ABI 6 without scopes", 6, Rules{}, nil, []string{"scoping"}},
		{"ABI 7", 7, scoped, nil, []string{"ABI"}},
		{"newer than known", maxKnownABI + 1, Rules{}, []string{"newer than this package"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(limitations(tc.abi, tc.rules), "\n")
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("limitations(%d) = %q, want mention of %q", tc.abi, got, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("limitations(%d) = %q, want no mention of %q", tc.abi, got, w)
				}
			}
		})
	}
}
