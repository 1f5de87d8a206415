package docker

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/ironclaw/ironclaw/internal/seccomp"
	"golang.org/x/sys/unix"
)

// The container's seccomp profile carries the deny list of internal/seccomp
// to dockerd, which hands it to the OCI runtime (runc compiles it with
// libseccomp). It is the profile the oci backend writes into config.json,
// in Docker's profile format (the same JSON field names):
//
//   - default action allow; every name in seccomp.Denied fails with EPERM,
//     except clone3 with ENOSYS (so libc falls back to clone);
//   - the argument rules of seccomp.Restricted: ioctl TIOCSTI/TIOCLINUX,
//     clone with any CLONE_NEW* flag (one rule per flag: conditions are
//     ANDed, rules ORed), socket with protocol MPTCP or SCTP
//     (EPROTONOSUPPORT), each comparing the low 32 bits only;
//   - only the native architecture: libseccomp's bad-architecture action
//     kills a call from any other ABI.
//
// It replaces Docker's default profile (an allow list). Both refuse the
// same dangerous calls; ours is the one every IronClaw backend shares, so
// a command behaves the same on all of them.
//
// This duplicates oci.seccompProfile, which is unexported; see the report
// that asked for it to be exported (oci.SeccompProfile) so the two cannot
// drift. seccomp_test.go checks the names against internal/seccomp.

const low32 = 0xffffffff

type profile struct {
	DefaultAction string   `json:"defaultAction"`
	Architectures []string `json:"architectures"`
	Syscalls      []rule   `json:"syscalls"`
}

type rule struct {
	Names    []string  `json:"names"`
	Action   string    `json:"action"`
	ErrnoRet *uint     `json:"errnoRet,omitempty"`
	Args     []ruleArg `json:"args,omitempty"`
}

type ruleArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo"`
	Op       string `json:"op"`
}

// namespaceFlags are the clone flags that create a namespace.
var namespaceFlags = []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWTIME}

const (
	ipprotoSCTP  = 132
	ipprotoMPTCP = 262
)

func seccompArch() (string, error) {
	switch runtime.GOARCH {
	case "amd64":
		return "SCMP_ARCH_X86_64", nil
	case "arm64":
		return "SCMP_ARCH_AARCH64", nil
	}
	return "", fmt.Errorf("seccomp: no profile for %s", runtime.GOARCH)
}

func seccompProfile() (*profile, error) {
	arch, err := seccompArch()
	if err != nil {
		return nil, err
	}
	errno := func(e unix.Errno) *uint { v := uint(e); return &v }
	p := &profile{DefaultAction: "SCMP_ACT_ALLOW", Architectures: []string{arch}}
	var eperm []string
	for _, name := range seccomp.Denied() {
		if name != "clone3" {
			eperm = append(eperm, name)
		}
	}
	if len(eperm) == 0 {
		return nil, fmt.Errorf("seccomp: the deny list is empty on %s", runtime.GOARCH)
	}
	p.Syscalls = append(p.Syscalls,
		rule{Names: eperm, Action: "SCMP_ACT_ERRNO", ErrnoRet: errno(unix.EPERM)},
		rule{Names: []string{"clone3"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: errno(unix.ENOSYS)},
	)
	masked := func(index uint, v uint64) []ruleArg {
		return []ruleArg{{Index: index, Value: low32, ValueTwo: v, Op: "SCMP_CMP_MASKED_EQ"}}
	}
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		p.Syscalls = append(p.Syscalls, rule{Names: []string{"ioctl"}, Action: "SCMP_ACT_ERRNO",
			ErrnoRet: errno(unix.EPERM), Args: masked(1, req)})
	}
	for _, flag := range namespaceFlags {
		// clone's flags are argument 0 on amd64 and arm64.
		p.Syscalls = append(p.Syscalls, rule{Names: []string{"clone"}, Action: "SCMP_ACT_ERRNO",
			ErrnoRet: errno(unix.EPERM), Args: []ruleArg{{Index: 0, Value: flag, ValueTwo: flag, Op: "SCMP_CMP_MASKED_EQ"}}})
	}
	for _, proto := range []uint64{ipprotoMPTCP, ipprotoSCTP} {
		p.Syscalls = append(p.Syscalls, rule{Names: []string{"socket"}, Action: "SCMP_ACT_ERRNO",
			ErrnoRet: errno(unix.EPROTONOSUPPORT), Args: masked(2, proto)})
	}
	return p, nil
}

// seccompOpt is the SecurityOpt entry that installs the profile.
func seccompOpt() (string, error) {
	p, err := seccompProfile()
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	return "seccomp=" + string(data), nil
}
