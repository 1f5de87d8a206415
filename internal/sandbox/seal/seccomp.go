package seal

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/ironclaw/ironclaw/internal/seccomp"
	"golang.org/x/sys/unix"
)

// The seal's seccomp filter, as an OCI profile: it carries the deny list of
// internal/seccomp to the runtime, which compiles it with libseccomp
// (runc, crun) or enforces it in the gVisor sentry (runsc with
// --oci-seccomp), and to dockerd (Docker's profile format has the same
// JSON field names), which hands it to its runtime; the native init
// installs internal/seccomp's own compilation of the same tables:
//
//   - default action allow; every name in seccomp.Denied fails with EPERM,
//     except clone3 with ENOSYS (so libc falls back to clone);
//   - the argument rules of seccomp.Restricted, restated as OCI argument
//     conditions: ioctl TIOCSTI/TIOCLINUX, clone with any CLONE_NEW* flag
//     (one rule per flag: OCI conditions are ANDed, rules ORed), socket
//     with protocol MPTCP or SCTP (EPROTONOSUPPORT), mknod and mknodat of a
//     character or block device (the mode's S_IFMT bits; gVisor would make
//     them). Each compares only the low 32 bits (SCMP_CMP_MASKED_EQ), as
//     the kernel does for these arguments, so junk in the high word does
//     not slip past;
//   - architectures: only the native one. libseccomp's bad-architecture
//     action kills a call from any other ABI (i386 int $0x80, x32), as the
//     native filter's arch guard does.
//
// Differences from the native filter: names that the runtime's libseccomp
// does not know (calls newer than it) are skipped by the runtime rather
// than refused; the sandbox still holds no capability for any of them.
//
// So every backend refuses the same calls.

const low32 = 0xffffffff

// Seccomp is an OCI runtime-spec seccomp profile (config.json's
// linux.seccomp), as Profile builds it.
type Seccomp struct {
	DefaultAction string        `json:"defaultAction"`
	Architectures []string      `json:"architectures"`
	Syscalls      []SeccompRule `json:"syscalls"`
}

// SeccompRule is one entry of Seccomp.Syscalls.
type SeccompRule struct {
	Names    []string     `json:"names"`
	Action   string       `json:"action"`
	ErrnoRet *uint        `json:"errnoRet,omitempty"`
	Args     []SeccompArg `json:"args,omitempty"`
}

// SeccompArg is one argument condition of a SeccompRule.
type SeccompArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

// restrictedNames are the calls the argument rules below cover; a test
// checks them against seccomp.Restricted so the two filters cannot drift.
var restrictedNames = func() []string {
	if runtime.GOARCH == "amd64" {
		return []string{"clone", "ioctl", "mknod", "mknodat", "socket"}
	}
	return []string{"clone", "ioctl", "mknodat", "socket"}
}()

// namespaceFlags are the clone flags that create a namespace (see
// internal/seccomp).
var namespaceFlags = []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWTIME}

const (
	ipprotoSCTP  = 132
	ipprotoMPTCP = 262
)

func ociArch() (string, error) {
	switch runtime.GOARCH {
	case "amd64":
		return "SCMP_ARCH_X86_64", nil
	case "arm64":
		return "SCMP_ARCH_AARCH64", nil
	}
	return "", fmt.Errorf("seccomp: no profile for %s", runtime.GOARCH)
}

// Profile returns the seccomp profile of every sandbox on this
// architecture (see above). It is built once; callers must not change it.
func Profile() (*Seccomp, error) {
	profileOnce.Do(func() { profile, profileErr = buildProfile() })
	return profile, profileErr
}

var (
	profileOnce sync.Once
	profile     *Seccomp
	profileErr  error
)

func buildProfile() (*Seccomp, error) {
	arch, err := ociArch()
	if err != nil {
		return nil, err
	}
	errno := func(e unix.Errno) *uint { v := uint(e); return &v }
	p := &Seccomp{DefaultAction: "SCMP_ACT_ALLOW", Architectures: []string{arch}}

	var eperm []string
	for _, name := range seccomp.Denied() {
		if name == "clone3" {
			continue
		}
		eperm = append(eperm, name)
	}
	if len(eperm) == 0 {
		return nil, fmt.Errorf("seccomp: the deny list is empty on %s", runtime.GOARCH)
	}
	p.Syscalls = append(p.Syscalls,
		SeccompRule{Names: eperm, Action: "SCMP_ACT_ERRNO", ErrnoRet: errno(unix.EPERM)},
		SeccompRule{Names: []string{"clone3"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: errno(unix.ENOSYS)},
	)
	masked := func(index uint, v uint64) []SeccompArg {
		return []SeccompArg{{Index: index, Value: low32, ValueTwo: v, Op: "SCMP_CMP_MASKED_EQ"}}
	}
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		p.Syscalls = append(p.Syscalls, SeccompRule{Names: []string{"ioctl"}, Action: "SCMP_ACT_ERRNO",
			ErrnoRet: errno(unix.EPERM), Args: masked(1, req)})
	}
	for _, flag := range namespaceFlags {
		p.Syscalls = append(p.Syscalls, SeccompRule{Names: []string{"clone"}, Action: "SCMP_ACT_ERRNO",
			ErrnoRet: errno(unix.EPERM), Args: []SeccompArg{{Index: cloneFlagsArg(), Value: flag, ValueTwo: flag, Op: "SCMP_CMP_MASKED_EQ"}}})
	}
	for _, proto := range []uint64{ipprotoMPTCP, ipprotoSCTP} {
		p.Syscalls = append(p.Syscalls, SeccompRule{Names: []string{"socket"}, Action: "SCMP_ACT_ERRNO",
			ErrnoRet: errno(unix.EPROTONOSUPPORT), Args: masked(2, proto)})
	}
	mknod := map[string]uint{"mknodat": 2}
	if runtime.GOARCH == "amd64" {
		mknod["mknod"] = 1 // arm64 has only mknodat
	}
	for _, name := range []string{"mknod", "mknodat"} {
		arg, ok := mknod[name]
		if !ok {
			continue
		}
		for _, typ := range []uint64{unix.S_IFCHR, unix.S_IFBLK} {
			p.Syscalls = append(p.Syscalls, SeccompRule{Names: []string{name}, Action: "SCMP_ACT_ERRNO",
				ErrnoRet: errno(unix.EPERM), Args: []SeccompArg{{Index: arg, Value: unix.S_IFMT, ValueTwo: typ, Op: "SCMP_CMP_MASKED_EQ"}}})
		}
	}
	return p, nil
}

// cloneFlagsArg is the argument of clone(2) holding the flags: 0 on amd64
// and arm64.
func cloneFlagsArg() uint { return 0 }
