package layering

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A rule is about the packages its pkgs patterns match (module-relative
// paths; "a/b/..." is a/b and everything below it). It says one of:
//
//   - only: the only packages of ours they may import (an empty, non-nil
//     list: none);
//   - never: packages of ours they must not import;
//   - usedBy: the only packages that may import them;
//   - testOnly: only _test.go files (and the other kits) may import them.
//
// only and never hold for the packages' own files, and with tests: true
// for their tests too; usedBy holds for every importer, tests included.
// Every pattern must match some package, so a move that leaves a rule
// behind fails here, naming the pattern.
type rule struct {
	pkgs     []string
	only     []string
	never    []string
	usedBy   []string
	testOnly bool
	tests    bool
	why      string
}

// Shared pattern lists.
var (
	// vocabulary: the error classes, safe text, defaults. Anything may
	// import them.
	vocabulary = []string{"internal/errdefs", "internal/textsafe", "internal/defaults"}
	// sandboxSide: what makes and runs sandboxes, and the kernel pieces
	// of the seal. It knows nothing of the daemon around it.
	sandboxSide = []string{"internal/sandbox/...", "internal/rootfs", "internal/cgroups", "internal/seccomp", "internal/landlock"}
	// inSandbox: the code that runs inside a sandbox (pid 1, the exec
	// front, file operations, path resolution) and the protocol it
	// speaks with the daemon.
	inSandbox = []string{"internal/sandbox/inside/...", "internal/sandbox/wire"}
	// backendHosts: the daemon's side of each backend.
	backendHosts = []string{
		"internal/sandbox/native", "internal/sandbox/oci", "internal/sandbox/container",
		"internal/sandbox/docker", "internal/sandbox/backend",
	}
	// heavyCLI: what only ironclaw-full may link, for the start of every
	// other command (TestThinCLILinksNothingHeavy).
	heavyCLI = []string{"internal/cli/full", "internal/daemon", "internal/api", "internal/api/console", "internal/session", "internal/gateway/...",
		"internal/modelproxy/...", "internal/egress", "internal/policy", "internal/secrets", "internal/store", "internal/audit",
		"internal/image", "internal/e2b", "internal/e2b/control", "internal/e2b/envd", "internal/e2b/envdpb/...", "internal/metrics"}
	// testKits: helpers for tests, never linked into the binary.
	testKits = []string{"internal/testutil/...", "internal/sandbox/conformance", "internal/sandbox/sandboxtest", "internal/e2b/e2btest"}
)

func join(lists ...[]string) []string { return slices.Concat(lists...) }

// rules is docs/architecture.md's "Layering", as data. Keep the two in
// step.
var rules = []rule{
	// Leaves.
	{
		pkgs: vocabulary, only: []string{},
		why: "the vocabulary (errdefs, textsafe, defaults) is imported by every layer, so it imports nothing of ours",
	},
	{
		pkgs: []string{"internal/metrics"}, only: []string{},
		why: "the metrics registry and its text format are a leaf the API and the daemon fill: they import nothing of ours",
	},
	{
		pkgs: []string{"internal/api/wire"}, only: []string{"internal/sandbox"},
		why: "the API's wire types go into every client: the standard library and package sandbox's JSON forms only",
	},
	{
		pkgs: []string{"internal/api/console", "internal/api/openapi", "internal/modelproxy/mock"}, only: vocabulary,
		why: "the web console's files, the API document's reader and the offline mock provider stand alone",
	},
	{
		pkgs: []string{"internal/rootfs", "internal/cgroups", "internal/seccomp", "internal/landlock", "internal/sandbox/inside/execpath"},
		only: join(vocabulary, testKits), tests: true,
		why: "the kernel pieces of the seal and the root's plan know nothing of sandboxes or of who asks for them",
	},
	{
		pkgs: []string{"internal/sandbox"}, only: vocabulary,
		why: "Spec and the Runtime interface are what every backend and every caller shares: nothing above them",
	},

	// The sandbox side, and the code inside a sandbox.
	{
		pkgs: sandboxSide, only: join(sandboxSide, vocabulary, testKits), tests: true,
		why: "dependencies point inward (api -> session -> sandbox): the sandbox side imports no daemon-side package, even in tests",
	},
	{
		pkgs: inSandbox, never: join(backendHosts, testKits),
		why: "what runs inside a sandbox links no backend's host side (its own tests may drive one)",
	},
	{
		pkgs: []string{"internal/sandbox/native"}, never: []string{"internal/sandbox/oci", "internal/sandbox/container", "internal/sandbox/docker"},
		why: "backends share code through the packages below them, not each other",
	},
	{
		pkgs:  []string{"internal/sandbox/oci", "internal/sandbox/container"},
		never: []string{"internal/sandbox/native", "internal/sandbox/docker"},
		why:   "backends share code through the packages below them, not each other",
	},
	{
		pkgs: []string{"internal/sandbox/docker"}, never: []string{"internal/sandbox/native", "internal/sandbox/oci"},
		why: "backends share code through the packages below them, not each other",
	},
	{
		pkgs: []string{"internal/sandbox/docker/engine"}, only: []string{}, tests: true,
		why: "the Docker Engine API client speaks HTTP to dockerd on the standard library alone: it knows nothing of sandboxes",
	},
	{
		pkgs: []string{"internal/sandbox/docker/engine"}, usedBy: []string{"internal/sandbox/docker"},
		why: "the Engine API client covers exactly the docker backend's calls; it is no general Docker library",
	},

	// The daemon side: down from the API, never back.
	{
		pkgs: []string{"internal/store"}, only: vocabulary,
		why: "the store knows SQL and its migrations, not what the rows mean",
	},
	{
		pkgs:  []string{"internal/audit", "internal/tools"},
		only:  join(vocabulary, []string{"internal/store", "internal/keyfile"}, testKits),
		tests: true,
		why:   "the audit log and the tool registry sit on the store (and the key-file reader) and nothing else",
	},
	{
		pkgs: []string{"internal/volume"}, only: join(vocabulary, []string{"internal/sandbox", "internal/store"}, testKits), tests: true,
		why: "volumes sit on the store and hand out sandbox mounts; the session and the API reach them through interfaces they declare",
	},
	{
		pkgs: []string{"internal/secrets"}, only: join(vocabulary, []string{"internal/audit", "internal/egress", "internal/keyfile"}),
		why: "the brokered secrets sit on the audit log, the broker's rule syntax and the key-file reader; the session, the gateway and the broker reach them through interfaces they declare",
	},
	{
		pkgs: []string{"internal/session"},
		only: join(vocabulary, []string{"internal/sandbox", "internal/store", "internal/audit", "internal/netlimit"}),
		why:  "api -> session -> sandbox: session calls only down, and reaches the egress broker, model proxy and gateway through interfaces it declares",
	},
	{
		pkgs: []string{"internal/session", "internal/gateway/...", "internal/modelproxy/...", "internal/egress", "internal/audit",
			"internal/store", "internal/tools", "internal/policy", "internal/netlimit", "internal/image", "internal/volume", "internal/secrets"},
		never: []string{"internal/api/...", "internal/daemon", "internal/cli", "internal/client"}, tests: true,
		why: "only the API speaks HTTP to callers and only the daemon wires the services: nothing below them imports either",
	},
	{
		pkgs: []string{"internal/client"}, only: join(vocabulary, []string{"internal/api/wire", "internal/sandbox"}),
		why: "the Go client carries nothing of the daemon: the wire types and package sandbox's JSON forms",
	},
	{
		pkgs: []string{"internal/cli", "internal/cli/flagtypes"}, never: heavyCLI,
		why: "the CLI reaches a daemon only over HTTP (internal/client) and a runtime only for `run` and `doctor`; what needs the daemon's packages is in internal/cli/full, which only ironclaw-full links",
	},
	{
		pkgs: []string{"internal/cli/full"}, never: []string{"internal/cli"},
		why: "package cli's tests use package full, and the ironclaw binary links cli without full",
	},

	// Who may import what.
	{
		pkgs: []string{"internal/cli", "internal/cli/full"}, usedBy: []string{"cmd/...", "internal/cli"},
		why: "main is thin: the command line is a library only main uses",
	},
	{
		pkgs: []string{"internal/daemon"}, usedBy: []string{"cmd/...", "internal/cli/full", "internal/cli", "internal/e2b/e2btest"},
		why: "the daemon is `ironclaw serve`: only the CLI's heavy part starts it (package cli only in its tests, which the rule on cli holds to; and the E2B test kit, whose tests drive the whole daemon as the SDKs do)",
	},
	{
		pkgs: []string{"internal/api", "internal/api/console"}, usedBy: []string{"internal/daemon"},
		why: "the API server is wired by the daemon; clients use internal/client and internal/api/wire",
	},
	{
		pkgs: []string{"cmd/..."}, only: []string{"internal/cli", "internal/cli/full", "internal/sandbox/inside"},
		why: "main only picks the process it is: inside a sandbox (the native init, the container helper) or the CLI",
	},
	{
		pkgs: testKits, testOnly: true,
		why: "test kits are never linked into the binary",
	},
}

// Every import of ours obeys the rules.
func TestImportsFollowTheLayering(t *testing.T) {
	_, pkgs := modulePackages(t)
	for _, r := range rules {
		if r.why == "" || r.only != nil && (r.never != nil || r.usedBy != nil || r.testOnly) ||
			r.never != nil && (r.usedBy != nil || r.testOnly) || r.usedBy != nil && r.testOnly {
			t.Fatalf("rule %v: give it a why and exactly one of only, never, usedBy, testOnly", r.pkgs)
		}
	}
	for _, p := range pkgs {
		for _, imp := range p.imports {
			for _, v := range violations(p.rel, imp, false) {
				t.Errorf("%s imports %s: %s", p.rel, imp, v)
			}
		}
		for _, imp := range p.testImports {
			if slices.Contains(p.imports, imp) {
				continue
			}
			for _, v := range violations(p.rel, imp, true) {
				t.Errorf("%s's tests import %s: %s", p.rel, imp, v)
			}
		}
	}
}

// Every pattern of every rule names at least one package, so a moved or
// renamed package cannot leave a rule that silently checks nothing.
func TestLayeringPatternsMatchPackages(t *testing.T) {
	_, pkgs := modulePackages(t)
	seen := map[string]bool{}
	for _, r := range rules {
		for _, pat := range join(r.pkgs, r.only, r.never, r.usedBy) {
			if seen[pat] {
				continue
			}
			seen[pat] = true
			if !slices.ContainsFunc(pkgs, func(p *pkg) bool { return match(pat, p.rel) }) {
				t.Errorf("the layering pattern %q matches no package (moved or renamed?): update the rules here and in docs/architecture.md", pat)
			}
		}
	}
}

// The checks catch what they are for: each violation below is one a rule
// must report. (A rule that cannot fail is worse than none.)
func TestLayeringCatchesViolations(t *testing.T) {
	for _, tc := range []struct {
		from, imp string
		test      bool
	}{
		{"internal/sandbox/native", "internal/session", false},
		{"internal/sandbox/inside/agent", "internal/audit", false},
		{"internal/sandbox/inside/agent", "internal/sandbox/container", false},
		{"internal/sandbox/inside/boot", "internal/sandbox/sandboxtest", false},
		{"internal/sandbox/oci", "internal/sandbox/native", false},
		{"internal/sandbox/docker", "internal/store", true},
		{"internal/session", "internal/api", false},
		{"internal/store", "internal/audit", false},
		{"internal/errdefs", "internal/sandbox", false},
		{"internal/api/wire", "internal/session", false},
		{"internal/client", "internal/daemon", false},
		{"internal/api", "internal/cli", false},
		{"internal/gateway", "internal/daemon", false},
		{"internal/sandbox/inside/boot", "internal/sandbox/native", false},
		{"internal/sandbox/native", "internal/sandbox/docker", false},
		{"internal/session", "internal/testutil/stack", false},
		{"cmd/ironclaw", "internal/daemon", false},
		{"internal/cli", "internal/daemon", false},
		{"internal/cli", "internal/cli/full", false},
		{"internal/cli/full", "internal/cli", false},
		{"internal/metrics", "internal/errdefs", false},
		{"internal/sandbox/docker/engine", "internal/sandbox", false},
		{"internal/sandbox/oci", "internal/sandbox/docker/engine", false},
	} {
		if got := violations(tc.from, tc.imp, tc.test); len(got) == 0 {
			t.Errorf("%s importing %s (test: %v) breaks no rule", tc.from, tc.imp, tc.test)
		}
	}
	// And what the architecture allows passes.
	for _, tc := range []struct{ from, imp string }{
		{"internal/api", "internal/session"},
		{"internal/session", "internal/sandbox"},
		{"internal/daemon", "internal/api"},
		{"internal/cli/full", "internal/daemon"},
		{"internal/cli", "internal/client"},
		{"internal/sandbox/native", "internal/sandbox/inside/boot"},
		{"internal/sandbox/docker", "internal/sandbox/container"},
		{"internal/sandbox/docker", "internal/sandbox/docker/engine"},
		{"internal/sandbox/inside/agent", "internal/sandbox/wire"},
		{"internal/gateway", "internal/errdefs"},
		{"internal/api", "internal/metrics"},
		{"internal/daemon", "internal/metrics"},
	} {
		if got := violations(tc.from, tc.imp, false); len(got) > 0 {
			t.Errorf("%s importing %s: %s", tc.from, tc.imp, strings.Join(got, "; "))
		}
	}
}

// violations is what the rules say of from importing imp (from a test
// file when test is set): one line per broken rule.
func violations(from, imp string, test bool) []string {
	var out []string
	for _, r := range rules {
		if matchAny(r.pkgs, from) && (!test || r.tests) {
			switch {
			case r.only != nil && !matchAny(r.only, imp):
				out = append(out, fmt.Sprintf("not among the packages %s may import (%s): %s", strings.Join(r.pkgs, ", "), strings.Join(r.only, ", "), r.why))
			case matchAny(r.never, imp):
				out = append(out, r.why)
			}
		}
		if matchAny(r.pkgs, imp) {
			switch {
			case r.usedBy != nil && !matchAny(r.usedBy, from):
				out = append(out, fmt.Sprintf("only %s may import it: %s", strings.Join(r.usedBy, ", "), r.why))
			case r.testOnly && !test && !matchAny(r.pkgs, from): // a kit may build on another
				out = append(out, "only tests may import it: "+r.why)
			}
		}
	}
	return out
}

// The ironclaw binary links nothing heavy, through any chain of imports:
// its start is the CLI's (docs/performance.md). The direct rules above
// keep package cli clean; this follows every path from cmd/ironclaw.
func TestThinCLILinksNothingHeavy(t *testing.T) {
	_, pkgs := modulePackages(t)
	byRel := map[string]*pkg{}
	for _, p := range pkgs {
		byRel[p.rel] = p
	}
	if byRel["cmd/ironclaw"] == nil || byRel["cmd/ironclaw-full"] == nil {
		t.Fatal("cmd/ironclaw or cmd/ironclaw-full is missing")
	}
	linked := func(root string) map[string]string { // package -> the package that imports it
		via := map[string]string{root: ""}
		queue := []string{root}
		for len(queue) > 0 {
			p := byRel[queue[0]]
			queue = queue[1:]
			if p == nil {
				continue
			}
			for _, imp := range p.imports {
				if _, seen := via[imp]; !seen {
					via[imp] = p.rel
					queue = append(queue, imp)
				}
			}
		}
		return via
	}
	thin := linked("cmd/ironclaw")
	for p, from := range thin {
		if matchAny(heavyCLI, p) {
			t.Errorf("cmd/ironclaw links %s (imported by %s): it belongs in ironclaw-full (internal/cli/full)", p, from)
		}
	}
	// The check sees what it must: the full binary does link them.
	if via := linked("cmd/ironclaw-full"); via["internal/daemon"] == "" || via["internal/store"] == "" {
		t.Errorf("the walk from cmd/ironclaw-full did not reach internal/daemon and internal/store: the check is blind")
	}
}
