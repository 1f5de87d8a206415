package api

import (
	"context"
	"go/ast"
	"go/token"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/modelproxy"
	"github.com/ironclaw/ironclaw/internal/testutil/gosource"
)

// stubModel stands in for the model proxy where only its routes matter.
type stubModel struct{}

func (stubModel) Handler() http.Handler { return http.NotFoundHandler() }
func (stubModel) MintHost(string) (modelproxy.HostToken, error) {
	return modelproxy.HostToken{}, nil
}
func (stubModel) RevokeHost(string, string) error { return nil }

// stubVolumes turns the volume routes on; their behaviour is tested
// where the real volumes are (internal/volume, the daemon's tests).
type stubVolumes struct{}

func (stubVolumes) Create(_ context.Context, p, name string, size int64) (VolumeInfo, error) {
	return VolumeInfo{Name: name, Principal: p, SizeBytes: size}, nil
}
func (stubVolumes) List(context.Context, string, bool) ([]VolumeInfo, error) { return nil, nil }
func (stubVolumes) Get(_ context.Context, p, name string, _ bool) (VolumeInfo, error) {
	return VolumeInfo{Name: name, Principal: p}, nil
}
func (stubVolumes) Delete(context.Context, string, string, bool) error { return nil }

// The daemon serves exactly the routes the document describes, each with
// the role the document names: a route cannot be added, dropped or
// opened up on one side only.
func TestRoutesMatchTheDocument(t *testing.T) {
	e := newEnv(t, envOpts{gateway: true, secrets: true, cfg: Config{Model: stubModel{}, Console: http.NotFoundHandler(), Volumes: stubVolumes{}}})
	doc, err := apiDoc()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ method, path string }
	docRoutes := map[key]string{}
	for _, r := range doc.Routes() {
		docRoutes[key{r.Method, r.Path}] = r.Op.Role
		// The document's security says the same as its role.
		var schemes []string
		if r.Op.Security != nil {
			for _, req := range *r.Op.Security {
				for name := range req {
					schemes = append(schemes, name)
				}
			}
		} else {
			schemes = []string{"agentToken", "operatorToken"}
		}
		slices.Sort(schemes)
		want := map[string][]string{"agent": {"agentToken", "operatorToken"}, "operator": {"operatorToken"},
			"model": {"modelApiKey", "modelToken"}, "none": nil}[r.Op.Role]
		if !slices.Equal(schemes, want) {
			t.Errorf("%s %s: role %s but security %v", r.Method, r.Path, r.Op.Role, schemes)
		}
	}
	served := map[key]bool{}
	for _, rt := range e.srv.routes {
		method, path, ok := strings.Cut(rt.pattern, " ")
		if !ok {
			// A prefix the model proxy serves: the document lists its
			// routes one by one.
			path, method = rt.pattern, ""
		}
		var matched []key
		for k := range docRoutes {
			if method == "" && strings.HasPrefix(k.path, path) || k.method == method && k.path == path {
				matched = append(matched, k)
			}
		}
		if len(matched) == 0 && rt.pattern == "GET /ui" {
			continue // the redirect to /ui/
		}
		if len(matched) == 0 {
			t.Errorf("the daemon serves %s, which the document does not describe", rt.pattern)
		}
		for _, k := range matched {
			served[k] = true
			if docRoutes[k] != rt.role {
				t.Errorf("%s %s: the daemon needs role %s, the document says %s", k.method, k.path, rt.role, docRoutes[k])
			}
		}
	}
	for k := range docRoutes {
		if !served[k] {
			t.Errorf("the document describes %s %s, which the daemon does not serve", k.method, k.path)
		}
	}
	// And the roles are what the daemon enforces: no token is 401, the
	// agent token on an operator route 403.
	for k, role := range docRoutes {
		path := strings.NewReplacer("{id}", "x", "{session}", "x").Replace(k.path)
		switch role {
		case "agent", "operator":
			e.wantError(http.StatusUnauthorized, wire.CodeUnauthorized, k.method, path, "", nil)
			if role == "operator" {
				e.wantError(http.StatusForbidden, wire.CodeForbidden, k.method, path, agentTok, nil)
			}
		}
	}
}

// Every error code the package writes is one of wire's constants (which
// the document lists): no apiError spells its code as a string.
func TestErrorCodesAreWireConstants(t *testing.T) {
	fset, files := gosource.Files(t, ".", 0)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			id, ok := cl.Type.(*ast.Ident)
			if !ok || id.Name != "apiError" && id.Name != "statusOf" {
				return true
			}
			if len(cl.Elts) >= 2 {
				if lit, ok := cl.Elts[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					t.Errorf("%s: apiError with the code %s: use a wire.Code constant", fset.Position(lit.Pos()), lit.Value)
				}
			}
			return true
		})
	}
	for _, c := range statusOf {
		if !slices.Contains(wire.ErrorCodes(), c.code) {
			t.Errorf("statusOf renders %v as %q, which is not an error code of the document", c.class, c.code)
		}
	}
}

// A body cannot carry what the document does not describe: every request
// schema the document closes (additionalProperties: false) is refused with
// a member it does not name, on every route that takes it, whatever the
// member claims to be (an approval's decider, a sandbox's owner).
func TestHostileUndocumentedMembersAreRefused(t *testing.T) {
	e := newEnv(t, envOpts{gateway: true, secrets: true, cfg: Config{Volumes: stubVolumes{}}})
	doc, err := apiDoc()
	if err != nil {
		t.Fatal(err)
	}
	s := e.create(nil)
	var filed wire.Approval
	e.must(http.StatusAccepted, "POST", "/v1/approvals", agentTok,
		map[string]any{"kind": "tool.call", "session": s.ID, "data": map[string]any{"tool": "t"}}, &filed)
	tried := 0
	for _, r := range doc.Routes() {
		rb := r.Op.RequestBody
		if rb == nil || rb.Content["application/json"] == nil {
			continue
		}
		schema, err := doc.Schema(rb.Content["application/json"].Schema)
		if err != nil {
			t.Fatal(err)
		}
		if schema.AdditionalProperties == nil || schema.AdditionalProperties.Allowed {
			continue
		}
		tok := agentTok
		if r.Op.Role == "operator" {
			tok = operTok
		}
		path := strings.NewReplacer("{id}", s.ID, "{name}", "a-name").Replace(r.Path)
		if strings.HasPrefix(r.Path, "/v1/approvals/{id}") {
			path = strings.Replace(r.Path, "{id}", filed.ID, 1)
		}
		for _, member := range []string{"x_undocumented", "decided_by", "principal", "requested_by"} {
			if schema.Properties.Get(member) != nil {
				continue
			}
			tried++
			msg := e.wantError(http.StatusBadRequest, wire.CodeInvalidArgument, r.Method, path, tok, map[string]any{member: "alice"})
			if !strings.Contains(msg, member) {
				t.Errorf("%s %s with %q: refused for another reason: %s", r.Method, r.Path, member, msg)
			}
		}
	}
	if tried < 4*8 {
		t.Errorf("only %d refusals tried: the document closes fewer request bodies than expected", tried)
	}
	// Nothing of it took effect: the approval is still pending, and the
	// only sandbox is the one created above.
	var a wire.Approval
	e.must(http.StatusOK, "GET", "/v1/approvals/"+filed.ID, operTok, nil, &a)
	if a.State != "pending" || a.DecidedBy != "" {
		t.Errorf("approval after the refused decisions: %+v", a)
	}
	var list wire.SandboxList
	e.must(http.StatusOK, "GET", "/v1/sandboxes", operTok, nil, &list)
	if len(list.Sandboxes) != 1 {
		t.Errorf("%d sandboxes after refused creates", len(list.Sandboxes))
	}
}
