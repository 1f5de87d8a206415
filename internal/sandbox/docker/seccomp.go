package docker

import (
	"encoding/json"

	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
)

// The container's seccomp profile carries the deny list of internal/seccomp
// to dockerd, which hands it to the OCI runtime (runc compiles it with
// libseccomp). It is the very profile the oci backend writes into
// config.json (oci.SeccompProfile): Docker's profile format has the same
// JSON field names. It replaces Docker's default profile (an allow list).
// Both refuse the same dangerous calls; ours is the one every IronClaw
// backend shares, so a command behaves the same on all of them.

// seccompOpt is the SecurityOpt entry that installs the profile.
func seccompOpt() (string, error) {
	p, err := oci.SeccompProfile()
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	return "seccomp=" + string(data), nil
}
