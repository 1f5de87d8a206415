package docker

import (
	"encoding/json"
	"errors"

	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
)

// The container's seccomp profile is the seal's (seal.Profile): the deny
// list of internal/seccomp, handed to dockerd, which hands it to the OCI
// runtime (runc compiles it with libseccomp). Docker's profile format has
// the same JSON field names as the OCI spec's. It replaces Docker's
// default profile (an allow list).
// Both refuse the same dangerous calls; ours is the one every IronClaw
// backend shares, so a command behaves the same on all of them.

// seccompOpt is the SecurityOpt entry that installs the profile p.
func seccompOpt(p *seal.Seccomp) (string, error) {
	if p == nil {
		return "", errors.New("seccomp: the seal has no profile")
	}
	data, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	return "seccomp=" + string(data), nil
}
