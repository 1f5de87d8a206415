package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ironclaw/ironclaw/internal/secrets"
)

// Secret is one entry of the secrets section: a credential the daemon
// brokers (issue 15). Sandboxes granted it see a placeholder in Env; the
// egress broker swaps in the value for Hosts only.
//
//	secrets:
//	  - name: github
//	    env: GITHUB_TOKEN            # default: the name upper-cased
//	    hosts: ["api.github.com"]
//	    header: Authorization        # default
//	    format: "Bearer {value}"     # default
//	    value_env: GITHUB_TOKEN      # or value_file: /etc/ironclaw/github.token
//	    grant: ask                   # ask (a secret.use approval per sandbox) | all
//
// The value is read by the daemon at start, from its own environment or
// from a file (one line; a trailing newline is dropped); policy secrets
// cannot be changed or removed through the API.
type Secret struct {
	Name      string   `yaml:"name"`
	Env       string   `yaml:"env"`
	Hosts     []string `yaml:"hosts"`
	Header    string   `yaml:"header"`
	Format    string   `yaml:"format"`
	Grant     string   `yaml:"grant"`
	ValueEnv  string   `yaml:"value_env"`
	ValueFile string   `yaml:"value_file"`
}

// Meta is the secret's metadata, defaults not yet applied.
func (s Secret) Meta() secrets.Meta {
	return secrets.Meta{Name: s.Name, Env: s.Env, Hosts: s.Hosts, Header: s.Header, Format: s.Format, Grant: s.Grant}
}

func validateSecrets(list []Secret) error {
	if len(list) > secrets.MaxSecrets {
		return fmt.Errorf("%w: secrets: %d entries, at most %d", ErrInvalid, len(list), secrets.MaxSecrets)
	}
	seen := map[string]bool{}
	for i, s := range list {
		if _, err := s.Meta().Normalize(); err != nil {
			return fmt.Errorf("%w: secrets[%d]: %v", ErrInvalid, i, strings.TrimPrefix(err.Error(), secrets.ErrInvalid.Error()+": "))
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: secrets[%d]: %s appears twice", ErrInvalid, i, s.Name)
		}
		seen[s.Name] = true
		switch {
		case (s.ValueEnv == "") == (s.ValueFile == ""):
			return fmt.Errorf("%w: secrets[%d] (%s): give exactly one of value_env and value_file", ErrInvalid, i, s.Name)
		case s.ValueFile != "" && !filepath.IsAbs(s.ValueFile):
			return fmt.Errorf("%w: secrets[%d] (%s): value_file %q must be an absolute path", ErrInvalid, i, s.Name, s.ValueFile)
		case s.ValueEnv != "" && (strings.ContainsAny(s.ValueEnv, "= \x00") || len(s.ValueEnv) > 128):
			return fmt.Errorf("%w: secrets[%d] (%s): value_env %q is not a variable name", ErrInvalid, i, s.Name, s.ValueEnv)
		}
	}
	return nil
}
