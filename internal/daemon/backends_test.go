package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
)

// What a sandbox sees of the daemon is the same on every backend: the
// model proxy and the egress broker at the same loopback addresses, in the
// same environment variables, reached without a network interface. A
// backend this host lacks is skipped with its reason (failed when CI's
// IRONCLAW_REQUIRE_OCI or IRONCLAW_REQUIRE_DOCKER names it).
func TestInsideContractOnEveryBackend(t *testing.T) {
	port := upstream(t, func(*http.Request) string { return "hello from the allowlisted host" })
	for _, name := range []string{backend.Runc, backend.Runsc, backend.Docker} {
		t.Run(name, func(t *testing.T) {
			required := slices.Contains(strings.Split(os.Getenv("IRONCLAW_REQUIRE_OCI"), ","), name) ||
				(name == backend.Docker && os.Getenv("IRONCLAW_REQUIRE_DOCKER") == "1")
			probe, err := backend.Open(context.Background(), backend.Options{Name: name, Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE")})
			if err != nil {
				if required || !errors.Is(err, sandbox.ErrUnsupported) {
					t.Fatalf("%s: %v", name, err)
				}
				t.Skipf("%s cannot run here: %v", name, err)
			}
			probe.Close(context.Background())
			r := startDaemon(t, t.TempDir(), func(c *Config) {
				c.Runtime = name
				c.Model.Provider = "mock"
				c.Egress.Allow = []string{"stand-in.test:" + port}
				c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
				c.Egress.DenyUnknown = true
				c.Egress.Resolver = fakeDNS{"stand-in.test": "127.0.0.1"}
			})
			cl := r.client(t, false)
			ctx := context.Background()
			sb := daemontest.CreateSandbox(t, cl)
			var out bytes.Buffer
			res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &out, Stderr: &out, Cmd: fmt.Sprintf(`
echo "model=$OPENAI_BASE_URL proxy=$HTTP_PROXY"
curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" "$OPENAI_BASE_URL/models" | head -c 200; echo
curl -sS --noproxy '' -x "$HTTP_PROXY" http://stand-in.test:%[1]s/; echo
curl -sS --noproxy '' -x "$HTTP_PROXY" -o /dev/null -w '%%{http_code}\n' http://elsewhere.test:%[1]s/
ls /sys/class/net 2>/dev/null; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`, port)})
			if err != nil || res.Exit != 0 {
				t.Fatalf("exec: %v %+v\n%s", err, res, out.String())
			}
			got := out.String()
			for _, want := range []string{"model=http://127.0.0.1:4000/openai/v1 proxy=http://127.0.0.1:4001", `"id":"mock-gpt"`,
				"hello from the allowlisted host", "403\n"} {
				if !strings.Contains(got, want) {
					t.Fatalf("missing %q in:\n%s", want, got)
				}
			}
			for _, l := range strings.Split(got[strings.LastIndex(got, "403\n")+4:], "\n") {
				if l != "" && l != "lo" {
					t.Fatalf("a network interface inside: %q in\n%s", l, got)
				}
			}
		})
	}
}
