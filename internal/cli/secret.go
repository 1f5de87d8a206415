package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// maxSecretValue is the daemon's bound on a value (secrets.MaxValueBytes;
// the CLI reaches the daemon only over HTTP).
const maxSecretValue = 16 << 10

func newSecretCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "secret",
		Short: "Brokered credentials (operator): set, ls, rm",
		Long: `Credentials a running 'ironclaw serve' brokers for sandboxes. A sandbox created
with --secret NAME sees only a placeholder in the secret's variable; the
egress broker puts the real value into its requests to the secret's hosts,
and refuses (and audits, secret.misuse) a placeholder sent anywhere else.
A secret with --grant ask (the default) files a secret.use approval for each
sandbox that asks for it. Values are never printed, returned or logged.
These commands need the operator token.`,
	}
	c.AddCommand(newSecretSetCmd(e), newSecretLsCmd(e), newSecretRmCmd(e))
	return c
}

func newSecretSetCmd(e *env) *cobra.Command {
	var s client.SecretSettings
	var fromFile string
	c := &cobra.Command{
		Use:   "set NAME --host HOST... [--env VAR] [--header NAME --format 'Bearer {value}'] [--grant ask|all] [--from-file FILE]",
		Short: "Create or rotate a secret; the value comes from stdin or --from-file, never the command line",
		Long: `Create a secret, or rotate one: a new value (and settings) in force for running
sandboxes at once. The value is read from --from-file, else from stdin (on a
terminal without echo); one trailing newline is dropped. It is never taken
from the command line, where other users and the shell's history would see it.`,
		Example: `  ironclaw secret set github --host api.github.com --env GITHUB_TOKEN < token.txt
  ironclaw secret set registry --host registry.example.com --header X-Api-Key --format '{value}' --from-file key
  ironclaw sandbox create --secret github`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(s.Hosts) == 0 {
				return errors.New("--host: give at least one host the value may go to")
			}
			v, err := readSecretValue(e, fromFile, args[0])
			if err != nil {
				return err
			}
			defer clear(v)
			got, err := newClient().SetSecret(c.Context(), args[0], s, v)
			if err != nil {
				return err
			}
			verb := "rotated"
			if got.Version == 1 {
				verb = "created"
			}
			fmt.Fprintf(e.stdout, "%s %s (version %d): %s=<placeholder> for %s\n", verb, safe(got.Name), got.Version, safe(got.Env), safe(strings.Join(got.Hosts, ", ")))
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVar(&s.Hosts, "host", nil, "host the value may go to, e.g. api.github.com or *.example.com:443 (repeatable; at least one)")
	f.StringVar(&s.Env, "env", "", "variable granted sandboxes see, holding the placeholder (default: NAME upper-cased)")
	f.StringVar(&s.Header, "header", "", "header whose value, when it is the placeholder alone, becomes --format (default Authorization)")
	f.StringVar(&s.Format, "format", "", "that header's value, holding {value} once (default 'Bearer {value}')")
	f.StringVar(&s.Grant, "grant", "", "ask (default: an approval per sandbox) or all")
	f.StringVar(&fromFile, "from-file", "", "read the value from this file instead of stdin")
	return c
}

// readSecretValue reads a value from file, or stdin, bounded, with one
// trailing line break dropped.
func readSecretValue(e *env, file, name string) ([]byte, error) {
	var r io.Reader = e.stdin
	what := "stdin"
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--from-file: %v", err)
		}
		defer f.Close()
		r, what = f, file
	} else if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(e.stderr, "value of %s (not shown): ", safe(name))
		v, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return nil, fmt.Errorf("reading the value: %v", err)
		}
		if len(v) == 0 {
			return nil, errors.New("the value is empty")
		}
		return v, nil
	}
	if r == nil {
		return nil, errors.New("no value: pipe it to stdin or give --from-file")
	}
	v, err := io.ReadAll(io.LimitReader(r, maxSecretValue+3))
	if err != nil {
		return nil, fmt.Errorf("reading the value from %s: %v", what, err)
	}
	v = bytes.TrimSuffix(v, []byte("\n"))
	v = bytes.TrimSuffix(v, []byte("\r"))
	switch {
	case len(v) == 0:
		return nil, fmt.Errorf("the value from %s is empty", what)
	case len(v) > maxSecretValue:
		return nil, fmt.Errorf("the value from %s is over %d bytes", what, maxSecretValue)
	}
	return v, nil
}

func newSecretLsCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls [--json]",
		Aliases: []string{"list"},
		Short:   "List secrets (never their values): NAME HOSTS ENV GRANT SOURCE VERSION UPDATED",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			list, err := newClient().ListSecrets(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			t := newTable(e.stdout, "NAME", "HOSTS", "ENV", "GRANT", "SOURCE", "VERSION", "UPDATED")
			now := time.Now()
			for _, s := range list {
				t.row(s.Name, strings.Join(s.Hosts, ","), s.Env, s.Grant, s.Source, fmt.Sprint(s.Version), age(now.Sub(s.UpdatedAt)))
			}
			return t.flush()
		},
	}
	jsonFlag(c.Flags(), &asJSON)
	return c
}

func newSecretRmCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove secrets (sandboxes granted one keep a placeholder that opens nothing)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, names []string) error {
			cl := newClient()
			return e.eachArg(names, func(n string) (string, error) {
				return safe(n), cl.RemoveSecret(c.Context(), n)
			})
		},
	}
}
