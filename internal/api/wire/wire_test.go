package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/api/openapi"
	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/testutil/gosource"
)

// goTypes pairs each schema of the document with the Go type that is its
// wire form. Package wire's types have the schema's name; the request
// bodies and approval payloads that package kinds decodes are its types.
var goTypes = []struct {
	schema string
	typ    reflect.Type
}{
	{"ErrorResponse", reflect.TypeFor[wire.ErrorResponse]()},
	{"ErrorDetail", reflect.TypeFor[wire.ErrorDetail]()},
	{"Health", reflect.TypeFor[wire.Health]()},
	{"Sandbox", reflect.TypeFor[wire.Sandbox]()},
	{"CreatedSandbox", reflect.TypeFor[wire.CreatedSandbox]()},
	{"SandboxList", reflect.TypeFor[wire.SandboxList]()},
	{"CreateSandboxRequest", reflect.TypeFor[wire.CreateSandboxRequest]()},
	{"Limits", reflect.TypeFor[wire.Limits]()},
	{"EgressAllow", reflect.TypeFor[wire.EgressAllow]()},
	{"LifetimeRequest", reflect.TypeFor[wire.LifetimeRequest]()},
	{"SandboxStats", reflect.TypeFor[wire.SandboxStats]()},
	{"ExecRequest", reflect.TypeFor[wire.ExecRequest]()},
	{"ExecOutputFrame", reflect.TypeFor[wire.ExecOutputFrame]()},
	{"ExecExitFrame", reflect.TypeFor[wire.ExecExitFrame]()},
	{"ExecWaitResult", reflect.TypeFor[wire.ExecWaitResult]()},
	{"ExecPending", reflect.TypeFor[wire.ExecPending]()},
	{"CreatedFrame", reflect.TypeFor[wire.CreatedFrame]()},
	{"FileEntry", reflect.TypeFor[wire.FileEntry]()},
	{"FileList", reflect.TypeFor[wire.FileList]()},
	{"Approval", reflect.TypeFor[wire.Approval]()},
	{"ApprovalField", reflect.TypeFor[wire.ApprovalField]()},
	{"ApprovalList", reflect.TypeFor[wire.ApprovalList]()},
	{"FileApprovalRequest", reflect.TypeFor[wire.FileApprovalRequest]()},
	{"DecideRequest", reflect.TypeFor[wire.DecideRequest]()},
	{"Tool", reflect.TypeFor[wire.Tool]()},
	{"ToolList", reflect.TypeFor[wire.ToolList]()},
	{"CreateVolumeRequest", reflect.TypeFor[wire.CreateVolumeRequest]()},
	{"Volume", reflect.TypeFor[wire.Volume]()},
	{"VolumeList", reflect.TypeFor[wire.VolumeList]()},
	{"VolumeMount", reflect.TypeFor[wire.VolumeMount]()},
	{"OpenPortRequest", reflect.TypeFor[wire.OpenPortRequest]()},
	{"PortURL", reflect.TypeFor[wire.PortURL]()},
	{"AuditRecord", reflect.TypeFor[wire.AuditRecord]()},
	{"AuditPage", reflect.TypeFor[wire.AuditPage]()},
	{"AuditVerification", reflect.TypeFor[wire.AuditVerification]()},
	{"AuditCheckpoints", reflect.TypeFor[wire.AuditCheckpoints]()},
	{"ModelToken", reflect.TypeFor[wire.ModelToken]()},
	{"SpawnProcessRequest", reflect.TypeFor[wire.SpawnProcessRequest]()},
	{"Process", reflect.TypeFor[wire.Process]()},
	{"ProcessList", reflect.TypeFor[wire.ProcessList]()},
	{"ProcessOutputFrame", reflect.TypeFor[wire.ProcessOutputFrame]()},
	{"ProcessEndFrame", reflect.TypeFor[wire.ProcessEndFrame]()},
	{"ProcessSignalRequest", reflect.TypeFor[wire.ProcessSignalRequest]()},
	{"StdinWritten", reflect.TypeFor[wire.StdinWritten]()},
	{"TerminalControl", reflect.TypeFor[wire.TerminalControl]()},
	{"TerminalSize", reflect.TypeFor[wire.TerminalSize]()},
	{"TerminalDropped", reflect.TypeFor[wire.TerminalDropped]()},
	{"TerminalExit", reflect.TypeFor[wire.TerminalExit]()},
	{"Snapshot", reflect.TypeFor[wire.Snapshot]()},
	{"SnapshotList", reflect.TypeFor[wire.SnapshotList]()},
	{"SetSecretRequest", reflect.TypeFor[wire.SetSecretRequest]()},
	{"Secret", reflect.TypeFor[wire.Secret]()},
	{"SecretList", reflect.TypeFor[wire.SecretList]()},

	{"EgressHostData", reflect.TypeFor[kinds.EgressHost]()},
	{"SandboxWidenData", reflect.TypeFor[kinds.SandboxWiden]()},
	{"WidenLimits", reflect.TypeFor[kinds.WidenLimits]()},
	{"ToolRegisterRequest", reflect.TypeFor[kinds.ToolRegister]()},
	{"AgentSpawnRequest", reflect.TypeFor[kinds.AgentSpawn]()},
	{"ExecCommandData", reflect.TypeFor[kinds.ExecCommand]()},
	{"ToolCallData", reflect.TypeFor[kinds.ToolCall]()},
	{"SecretUseData", reflect.TypeFor[kinds.SecretUse]()},
}

// forms are the Go types with a JSON form of their own.
var forms = openapi.Forms{
	reflect.TypeFor[sandbox.Duration](): "Duration",
	reflect.TypeFor[sandbox.Bytes]():    "ByteSize",
}

// notGo are the document's schemas no Go type stands for: enums and
// unions (Go has strings and several structs), and the model proxy's
// provider-shaped errors (written by package modelproxy as maps).
var notGo = []string{"ErrorCode", "Duration", "ByteSize", "SandboxState", "ExecFrame", "CreateFrame", "ProcessFrame", "ProcessState", "FileType", "ApprovalState",
	"ApprovalKind", "OpenAIError", "AnthropicError"}

func loadDoc(t *testing.T) *openapi.Document {
	t.Helper()
	doc, err := openapi.LoadRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// Every Go wire type encodes as its schema says, member for member.
func TestWireTypesMatchTheDocument(t *testing.T) {
	doc := loadDoc(t)
	for _, g := range goTypes {
		if err := doc.MatchGo(g.schema, g.typ, forms); err != nil {
			t.Errorf("%s and %s disagree: %v", g.schema, g.typ, err)
		}
	}
}

// Every schema has its Go type or is named as having none, and every
// exported struct of package wire stands for a schema: a body cannot be
// added on one side only.
func TestEverySchemaHasItsGoType(t *testing.T) {
	doc := loadDoc(t)
	var paired []string
	for _, g := range goTypes {
		paired = append(paired, g.schema)
	}
	for _, name := range doc.Components.Schemas.Names() {
		if !slices.Contains(paired, name) && !slices.Contains(notGo, name) {
			t.Errorf("schema %s has no Go type in goTypes (nor is it in notGo)", name)
		}
	}
	for _, name := range append(paired, notGo...) {
		if doc.Components.Schemas.Get(name) == nil {
			t.Errorf("%s is not a schema of the document", name)
		}
	}
	_, files := gosource.Files(t, ".", 0)
	for _, f := range files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, isStruct := ts.Type.(*ast.StructType); !isStruct || !ts.Name.IsExported() {
					continue
				}
				i := slices.IndexFunc(goTypes, func(g struct {
					schema string
					typ    reflect.Type
				}) bool {
					return g.typ.PkgPath() == reflect.TypeFor[wire.Health]().PkgPath() && g.typ.Name() == ts.Name.Name
				})
				if i < 0 {
					t.Errorf("wire.%s is in no pair of goTypes: add its schema to the document and the pair here", ts.Name.Name)
				} else if goTypes[i].schema != ts.Name.Name {
					t.Errorf("wire.%s stands for schema %s: a wire type has its schema's name", ts.Name.Name, goTypes[i].schema)
				}
			}
		}
	}
}

// The error codes are the document's ErrorCode enum, and every Code
// constant of the package is in ErrorCodes.
func TestErrorCodesMatchTheDocument(t *testing.T) {
	doc := loadDoc(t)
	var enum []string
	for _, v := range doc.Components.Schemas.Get("ErrorCode").Enum {
		enum = append(enum, v.(string))
	}
	if got := wire.ErrorCodes(); !slices.Equal(got, enum) {
		t.Errorf("wire.ErrorCodes() = %v,\nthe document's ErrorCode = %v", got, enum)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "wire.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
				continue
			}
			n++
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || !slices.Contains(enum, strings.Trim(lit.Value, `"`)) {
				t.Errorf("constant %s is not one of the document's error codes", name.Name)
			}
		}
		return true
	})
	if n != len(enum) {
		t.Errorf("%d Code constants, %d codes in the document", n, len(enum))
	}
}

// The package carries nothing of the daemon into a client: the standard
// library and package sandbox's JSON forms only.
func TestWireImportsOnlyTheStandardLibrary(t *testing.T) {
	fset, files := gosource.Files(t, ".", parser.ImportsOnly)
	for _, f := range files {
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if strings.Contains(p, ".") && p != "github.com/ironclaw/ironclaw/internal/sandbox" {
				t.Errorf("%s imports %s", fset.File(f.Pos()).Name(), p)
			}
		}
	}
}
