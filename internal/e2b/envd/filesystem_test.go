package envd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
	fspb "github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem/filesystemconnect"
	rpc "github.com/ironclaw/ironclaw/internal/e2b/envdpb/process"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/process/processconnect"
)

// fsEnv is a daemon, a sandbox of it and a filesystem client of the
// sandbox.
func fsEnv(t *testing.T) (*e2btest.Env, e2btest.Sandbox, filesystemconnect.FilesystemClient) {
	t.Helper()
	env := e2btest.Start(t, nil)
	sb := env.CreateNative(t, "agent.token", client.CreateRequest{})
	return env, sb, env.Filesystem(sb)
}

// sh runs a shell command in the sandbox through the native API.
func sh(t *testing.T, env *e2btest.Env, sb e2btest.Sandbox, cmd string) string {
	t.Helper()
	var out strings.Builder
	res, err := env.Agent.Exec(context.Background(), sb.SandboxID, client.ExecRequest{Argv: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &out})
	if err != nil || res.Exit != 0 {
		t.Fatalf("%s: %v %+v %s", cmd, err, res, out.String())
	}
	return out.String()
}

func put(t *testing.T, env *e2btest.Env, sb e2btest.Sandbox, p, content string) {
	t.Helper()
	if err := env.Agent.PutFile(context.Background(), sb.SandboxID, p, strings.NewReader(content), 0); err != nil {
		t.Fatal(err)
	}
}

func names(entries []*fspb.EntryInfo) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.GetPath())
	}
	return out
}

// Stat and ListDir answer from listings: types, modes, ls-style
// permissions, the sandbox user, paths resolved against /workspace.
func TestStatAndListDir(t *testing.T) {
	e2, sb, fs := fsEnv(t)
	ctx := context.Background()
	put(t, e2, sb, "/workspace/d/a.txt", "hello")
	put(t, e2, sb, "/workspace/d/sub/b.txt", "")
	put(t, e2, sb, "/workspace/d/sub/deeper/c.txt", "c")
	sh(t, e2, sb, "chmod 0600 /workspace/d/a.txt && ln -s a.txt /workspace/d/link")

	st, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "d/a.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetName() != "a.txt" || e.GetPath() != "/workspace/d/a.txt" || e.GetType() != fspb.FileType_FILE_TYPE_FILE ||
		e.GetSize() != 5 || e.GetMode() != 0o600 || e.GetPermissions() != "-rw-------" || e.GetOwner() != "sandbox" ||
		e.GetModifiedTime() == nil {
		t.Fatalf("stat: %+v", e)
	}
	for p, want := range map[string]string{"/workspace/d": "drwxr-xr-x", "~/d/sub": "drwxr-xr-x", "/workspace/d/link": "Lrwxrwxrwx", "/workspace": "drwxr-xr-x", "/tmp": "dtrwxrwxrwx"} {
		st, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if got := st.Msg.GetEntry().GetPermissions(); got != want {
			t.Fatalf("stat %s: permissions %q, want %q", p, got, want)
		}
	}
	_, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/workspace/d/nope"}))
	wantCode(t, "stat of nothing", err, connect.CodeNotFound)
	_, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/workspace/nope/x"}))
	wantCode(t, "stat beneath nothing", err, connect.CodeNotFound)

	ls, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/d", Depth: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(ls.Msg.GetEntries()), " "); got != "/workspace/d/a.txt /workspace/d/link /workspace/d/sub" {
		t.Fatalf("depth 1: %s", got)
	}
	ls0, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/d"}))
	if err != nil || len(ls0.Msg.GetEntries()) != 3 {
		t.Fatalf("depth 0 is 1: %v %v", names(ls0.Msg.GetEntries()), err)
	}
	ls2, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "d", Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(ls2.Msg.GetEntries()), " "); got != "/workspace/d/a.txt /workspace/d/link /workspace/d/sub /workspace/d/sub/b.txt /workspace/d/sub/deeper" {
		t.Fatalf("depth 2: %s", got)
	}
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/d/a.txt"}))
	wantCode(t, "list of a file", err, connect.CodeInvalidArgument)
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/none"}))
	wantCode(t, "list of nothing", err, connect.CodeNotFound)
	_, err = fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/d", Depth: 33}))
	wantCode(t, "depth over the bound", err, connect.CodeInvalidArgument)
}

// MakeDir, Move and Remove are audited execs; MakeDir of a directory
// there is AlreadyExists, of a file InvalidArgument.
func TestMakeDirMoveRemove(t *testing.T) {
	env, sb, fs := fsEnv(t)
	ctx := context.Background()
	md, err := fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "x/y/z"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := md.Msg.GetEntry(); e.GetPath() != "/workspace/x/y/z" || e.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("mkdir: %+v", e)
	}
	_, err = fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/workspace/x/y"}))
	wantCode(t, "mkdir of a directory there", err, connect.CodeAlreadyExists)
	put(t, env, sb, "/workspace/x/f.txt", "data")
	_, err = fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/workspace/x/f.txt"}))
	wantCode(t, "mkdir of a file there", err, connect.CodeInvalidArgument)

	mv, err := fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/workspace/x/f.txt", Destination: "/workspace/new/parent/g.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := mv.Msg.GetEntry(); e.GetPath() != "/workspace/new/parent/g.txt" || e.GetSize() != 4 {
		t.Fatalf("move: %+v", e)
	}
	if out := sh(t, env, sb, "cat /workspace/new/parent/g.txt; test -e /workspace/x/f.txt || echo gone"); out != "datagone\n" {
		t.Fatalf("after move: %q", out)
	}
	_, err = fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/workspace/x/none", Destination: "/workspace/y"}))
	wantCode(t, "move of nothing", err, connect.CodeNotFound)
	if _, err := fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/workspace/x", Destination: "/tmp/x"})); err != nil {
		t.Fatalf("move across areas: %v", err)
	}

	if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/workspace/new"})); err != nil {
		t.Fatal(err)
	}
	_, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/workspace/new"}))
	wantCode(t, "stat after remove", err, connect.CodeNotFound)
	if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/workspace/never/was"})); err != nil {
		t.Fatalf("remove of nothing: %v", err)
	}
	_, err = fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/workspace"}))
	wantCode(t, "remove of /workspace", err, connect.CodeInvalidArgument)

	// Every mutation is an exec in the audit log, and the upload a write.
	var argvs []string
	writes := 0
	for _, r := range daemontest.VerifiedAudit(t, env.Oper) {
		if r.Session != sb.SandboxID {
			continue
		}
		switch r.Kind {
		case "sandbox.exec.intent":
			var d struct{ Argv []string }
			if err := json.Unmarshal(r.Data, &d); err != nil {
				t.Fatal(err)
			}
			argvs = append(argvs, strings.Join(d.Argv, " "))
		case "sandbox.file.write":
			writes++
		}
	}
	all := strings.Join(argvs, "\n")
	for _, want := range []string{
		"mkdir -p -- /workspace/x/y/z",
		"mkdir -p -- /workspace/new/parent",
		"mv -T -- /workspace/x/f.txt /workspace/new/parent/g.txt",
		"mv -T -- /workspace/x /tmp/x",
		"rm -rf -- /workspace/new",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no exec %q in the audit log:\n%s", want, all)
		}
	}
	if writes == 0 {
		t.Error("no sandbox.file.write record")
	}
}

// Paths outside /workspace and /tmp are InvalidArgument; a symbolic link
// that leads out is refused by the sandbox (the native API answers 400,
// so InvalidArgument), for reads and mutations.
func TestPathsConfined(t *testing.T) {
	env, sb, fs := fsEnv(t)
	ctx := context.Background()
	for _, p := range []string{"/etc/passwd", "/workspace/../etc", "/", "~bob/x", "/home/user/a", "/tmpx/a", "a\x00b"} {
		_, err := fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
		wantCode(t, "stat "+p, err, connect.CodeInvalidArgument)
		_, err = fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: p}))
		wantCode(t, "mkdir "+p, err, connect.CodeInvalidArgument)
		_, err = fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: p}))
		wantCode(t, "remove "+p, err, connect.CodeInvalidArgument)
		_, err = fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: "/workspace/a", Destination: p}))
		wantCode(t, "move to "+p, err, connect.CodeInvalidArgument)
	}
	sh(t, env, sb, "ln -s /etc /workspace/esc")
	_, err := fs.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace/esc"}))
	wantCode(t, "list through an escaping link", err, connect.CodeInvalidArgument)
	_, err = fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/workspace/esc/passwd"}))
	wantCode(t, "stat through an escaping link", err, connect.CodeInvalidArgument)
	_, err = fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/workspace/esc/made/here"}))
	wantCode(t, "mkdir through an escaping link", err, connect.CodeInvalidArgument)
	_, err = fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/workspace/esc/hostname"}))
	wantCode(t, "remove through an escaping link", err, connect.CodeInvalidArgument)
	res, err := env.EnvdHTTP(sb).Get(env.BaseURL + "/files?path=/workspace/esc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK {
		t.Fatal("a download through an escaping link was served")
	}
	// The link itself is the sandbox's to remove.
	if _, err := fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/workspace/esc"})); err != nil {
		t.Fatal(err)
	}
}

// No principal, no service: a request without the access token is 401.
func TestFilesystemNeedsToken(t *testing.T) {
	env, sb, _ := fsEnv(t)
	sb.EnvdAccessToken = ""
	_, err := env.Filesystem(sb).Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: "/workspace"}))
	wantCode(t, "no token", err, connect.CodeUnauthenticated)
}

// A compressed request inflates to at most the services' message bound:
// 64 MiB of one letter gzips to about 64 KiB, which must not make the
// daemon hold 64 MiB (a hostile client's memory lever).
func TestCompressedRequestsAreBounded(t *testing.T) {
	env, sb, _ := fsEnv(t)
	huge := strings.Repeat("a", 64<<20)
	fs := filesystemconnect.NewFilesystemClient(env.EnvdHTTP(sb), env.BaseURL, connect.WithProtoJSON(), connect.WithSendGzip())
	_, err := fs.Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: huge}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || len(err.Error()) > 1024 {
		t.Fatalf("a gzip bomb to the filesystem service: %v, %d bytes: %.200s", connect.CodeOf(err), len(err.Error()), err)
	}
	// A long path, within the message bound, is refused without an echo.
	_, err = fs.Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: "/workspace/" + huge[:1<<20]}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(err.Error()) > 1024 {
		t.Fatalf("a 1 MiB path: %v, %d bytes: %.200s", connect.CodeOf(err), len(err.Error()), err)
	}
	pc := processconnect.NewProcessClient(env.EnvdHTTP(sb), env.BaseURL, connect.WithProtoJSON(), connect.WithSendGzip())
	st, err := pc.Start(context.Background(), connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: huge}}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		st.Close()
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted || len(err.Error()) > 1024 {
		t.Fatalf("a gzip bomb to the process service: %v, %d bytes: %.200s", connect.CodeOf(err), len(err.Error()), err)
	}
	// The services still answer.
	if _, err := env.Filesystem(sb).Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: "/workspace"})); err != nil {
		t.Fatal(err)
	}
}
