package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/client"
	fspb "github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem/filesystemconnect"
)

// The filesystem service acts on a sandbox's files through the native
// API alone: reads (Stat, ListDir, the watchers) are directory listings
// (GET .../files?list=1), which are not audited; mutations (MakeDir, Move,
// Remove) are execs of a fixed argv (mkdir -p --, mv -T --, rm -rf --),
// audited, rate limited and gated by the exec policy as any exec is; file
// contents go through GET and PUT .../files (files.go).
//
// Paths are E2B's: absolute, or relative to the home directory, which is
// /workspace here (E2B's /home/user is not aliased), "~" and "~/..." too.
// After cleaning, a path must be /workspace or /tmp or beneath them (the
// sandbox's writable areas, the only places the native file API reaches);
// anything else is InvalidArgument. Symbolic links are resolved inside the
// sandbox and never lead out: a listing through a link that points
// elsewhere is refused by the sandbox, and each mutation first lists the
// nearest existing ancestor of its paths, so it is refused the same way.

const (
	// fsHome is where relative paths and "~" resolve.
	fsHome = "/workspace"
	// fsOwner is the owner and group reported for every entry: the only
	// identity that can create files in the writable areas is the
	// sandbox's uid 65532, named "sandbox" in the sandbox's /etc/passwd.
	fsOwner = "sandbox"
	// fsMaxListEntries bounds the entries one ListDir answers.
	fsMaxListEntries = 20000
	// fsMaxDepth bounds ListDir's depth.
	fsMaxDepth = 32
	// fsMaxPath is Linux's PATH_MAX: a path of as many bytes or more
	// could name nothing in the sandbox.
	fsMaxPath = 4096
	// fsExecTimeout bounds a mutation's exec.
	fsExecTimeout = 60 * time.Second
)

// registerFilesystem mounts the filesystem.Filesystem service and /files.
func registerFilesystem(mux *http.ServeMux, cfg Config) {
	s := &fsService{cfg: cfg, watchers: newFsWatchers()}
	p, h := filesystemconnect.NewFilesystemHandler(s, connect.WithReadMaxBytes(maxMessage), connect.WithCompressMinBytes(compressMinBytes))
	mux.Handle(p, h)
	f := &filesHandler{cfg: cfg}
	mux.HandleFunc("GET /files", f.download)
	mux.HandleFunc("POST /files", f.upload)
}

type fsService struct {
	cfg      Config
	watchers *fsWatchers
}

var _ filesystemconnect.FilesystemHandler = (*fsService)(nil)

// fsTarget is the caller, the sandbox and the resolved path of a request
// about one path.
func fsTarget(ctx context.Context, raw string) (*client.Client, string, string, error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, "", "", err
	}
	p, err := fsResolve(raw)
	if err != nil {
		return nil, "", "", err
	}
	return api, id, p, nil
}

// fsResolve turns an E2B path into a clean absolute path in a writable
// area; see the package comment above.
func fsResolve(p string) (string, error) {
	orig := p
	if len(p) >= fsMaxPath {
		// Not echoed: it may be megabytes.
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a path is at most %d bytes (this one has %d)", fsMaxPath-1, len(p)))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("a path cannot contain a NUL byte"))
	}
	switch {
	case p == "" || p == "~":
		p = fsHome
	case strings.HasPrefix(p, "~/"):
		p = fsHome + p[1:]
	case strings.HasPrefix(p, "~"):
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q: another user's home directory cannot be expanded", orig))
	case !strings.HasPrefix(p, "/"):
		p = fsHome + "/" + p
	}
	p = path.Clean(p)
	if !fsWritable(p) {
		return "", connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("path %q is outside /workspace and /tmp, the sandbox's writable areas (relative paths resolve against /workspace)", orig))
	}
	return p, nil
}

func fsWritable(p string) bool {
	for _, base := range []string{"/workspace", "/tmp"} {
		if p == base || strings.HasPrefix(p, base+"/") {
			return true
		}
	}
	return false
}

// fsArea reports whether p is /workspace or /tmp itself.
func fsArea(p string) bool { return p == "/workspace" || p == "/tmp" }

// fsEntry is the EntryInfo of a listed entry of dir. Mode is the
// permission bits, as envd reports them; permissions is ls's form, with
// the type letter (d, L for a link, ? for a FIFO, socket or device).
func fsEntry(dir string, e client.FileEntry) *fspb.EntryInfo {
	perm, _ := strconv.ParseUint(e.Mode, 8, 32)
	fm := fs.FileMode(perm) & fs.ModePerm
	var typ fspb.FileType
	switch e.Type {
	case "file":
		typ = fspb.FileType_FILE_TYPE_FILE
	case "dir":
		typ, fm = fspb.FileType_FILE_TYPE_DIRECTORY, fm|fs.ModeDir
	case "symlink":
		typ, fm = fspb.FileType_FILE_TYPE_SYMLINK, fm|fs.ModeSymlink
	default:
		fm |= fs.ModeIrregular
	}
	info := &fspb.EntryInfo{
		Name:        e.Name,
		Type:        typ,
		Path:        path.Join(dir, e.Name),
		Size:        e.Size,
		Mode:        uint32(fm.Perm()),
		Permissions: fm.String(),
		Owner:       fsOwner,
		Group:       fsOwner,
	}
	if !e.MTime.IsZero() {
		info.ModifiedTime = timestamppb.New(e.MTime)
	}
	return info
}

// fsAreaEntry is the EntryInfo of /workspace or /tmp, which no listing
// shows (their parent is outside the writable areas): directories, 0755
// owned by the sandbox user and 1777 owned by root, as every backend
// makes them.
func fsAreaEntry(p string) *fspb.EntryInfo {
	if p == "/tmp" {
		return &fspb.EntryInfo{Name: "tmp", Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: p,
			Mode: 0o777, Permissions: (fs.ModeDir | fs.ModeSticky | 0o777).String(), Owner: "root", Group: "root"}
	}
	return &fspb.EntryInfo{Name: "workspace", Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: p,
		Mode: 0o755, Permissions: (fs.ModeDir | 0o755).String(), Owner: fsOwner, Group: fsOwner}
}

// fsStat is the entry at p, from a listing of its parent.
func fsStat(ctx context.Context, api *client.Client, id, p string) (*fspb.EntryInfo, error) {
	if fsArea(p) {
		// The sandbox must exist (and be the caller's) all the same.
		if _, err := api.GetSandbox(ctx, id); err != nil {
			return nil, rpcError(err)
		}
		return fsAreaEntry(p), nil
	}
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	entries, err := api.ListFiles(ctx, id, dir)
	if err != nil {
		return nil, rpcError(err)
	}
	for _, e := range entries {
		if e.Name == name {
			return fsEntry(dir, e), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: no such file or directory", p))
}

// fsCheckAncestor lists the nearest existing directory at or above dir,
// so that a mutation beneath it is refused, as the listing is, when a
// symbolic link on the way leads out of the writable areas. It reports
// whether dir itself exists.
func fsCheckAncestor(ctx context.Context, api *client.Client, id, dir string) (bool, error) {
	for d := dir; ; d = path.Dir(d) {
		if fsArea(d) {
			_, err := api.GetSandbox(ctx, id)
			return d == dir && err == nil, rpcError(err)
		}
		_, err := api.ListFiles(ctx, id, d)
		if err == nil {
			return d == dir, nil
		}
		if !client.IsCode(err, wire.CodeNotFound) {
			return false, rpcError(err)
		}
	}
}

// fsExec runs a mutation's fixed argv in the sandbox (an audited exec).
func fsExec(ctx context.Context, api *client.Client, id string, argv ...string) error {
	var stderr fsTail
	res, err := api.Exec(ctx, id, client.ExecRequest{Argv: argv, Cwd: fsHome, Timeout: fsExecTimeout, Stderr: &stderr})
	if err != nil {
		var ar *client.ApprovalRequiredError
		if errors.As(err, &ar) {
			return connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("%s: the exec policy requires an operator's approval (request %s); approve it, then retry", argv[0], ar.Approval.ID))
		}
		return rpcError(err)
	}
	if res.Exit == 0 {
		return nil
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = res.Error
	}
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", res.Exit)
	}
	code := connect.CodeInternal
	switch {
	case strings.Contains(msg, "No such file"):
		code = connect.CodeNotFound
	case strings.Contains(msg, "Permission denied"), strings.Contains(msg, "Read-only file system"), strings.Contains(msg, "Operation not permitted"):
		code = connect.CodePermissionDenied
	case strings.Contains(msg, "No space left"), strings.Contains(msg, "Disk quota"):
		code = connect.CodeResourceExhausted
	case strings.Contains(msg, "Not a directory"), strings.Contains(msg, "Is a directory"),
		strings.Contains(msg, "Directory not empty"), strings.Contains(msg, "File exists"):
		code = connect.CodeFailedPrecondition
	}
	if !strings.HasPrefix(msg, argv[0]+":") {
		msg = argv[0] + ": " + msg
	}
	return connect.NewError(code, errors.New(msg))
}

// fsTail keeps the first 4 KiB written to it (a command's stderr).
type fsTail struct{ b bytes.Buffer }

func (t *fsTail) Write(p []byte) (int, error) {
	if room := 4096 - t.b.Len(); room > 0 {
		t.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (t *fsTail) String() string { return t.b.String() }

func (s *fsService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	api, id, p, err := fsTarget(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := fsStat(ctx, api, id, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}

// ListDir lists the directory at path to depth levels (0 means 1, E2B's
// default: the directory's own entries), depth first in name order as
// envd walks; symbolic links are listed, not followed (the directory
// itself may be one). At most fsMaxListEntries entries and fsMaxDepth
// levels.
func (s *fsService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	api, id, p, err := fsTarget(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > fsMaxDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth %d is over the limit of %d", depth, fsMaxDepth))
	}
	var out []*fspb.EntryInfo
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := api.ListFiles(ctx, id, dir)
		if err != nil {
			if level > 1 && client.IsCode(err, wire.CodeNotFound) {
				return nil // gone meanwhile
			}
			return err
		}
		for _, e := range entries {
			if len(out) >= fsMaxListEntries {
				return connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("%s has more than %d entries to depth %d; list a subdirectory or a smaller depth", p, fsMaxListEntries, depth))
			}
			info := fsEntry(dir, e)
			out = append(out, info)
			if e.Type == "dir" && level < depth {
				if err := walk(info.Path, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, ce
		}
		if client.IsCode(err, wire.CodeNotFound) || client.IsCode(err, wire.CodeInvalidArgument) {
			// Say so when the path is there but is not a directory.
			if e, serr := fsStat(ctx, api, id, p); serr == nil && e.Type == fspb.FileType_FILE_TYPE_FILE {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", p))
			}
		}
		return nil, rpcError(err)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: out}), nil
}

// MakeDir makes the directory at path and its missing parents (mkdir -p).
// A directory already there is AlreadyExists (the SDK's makeDir then
// answers false); anything else there is InvalidArgument.
func (s *fsService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	api, id, p, err := fsTarget(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	switch e, err := fsStat(ctx, api, id, p); {
	case err == nil && e.Type == fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
	case err == nil:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	case connect.CodeOf(err) != connect.CodeNotFound:
		return nil, err
	}
	if _, err := fsCheckAncestor(ctx, api, id, path.Dir(p)); err != nil {
		return nil, err
	}
	if err := fsExec(ctx, api, id, "mkdir", "-p", "--", p); err != nil {
		return nil, err
	}
	e, err := fsStat(ctx, api, id, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination as rename(2) does (mv -T: a file
// replaces a file, a directory an empty directory), making the
// destination's missing parents first, as envd does; across /workspace
// and /tmp it copies.
func (s *fsService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	src, err := fsResolve(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := fsResolve(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	if fsArea(src) || fsArea(dst) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("/workspace and /tmp themselves cannot be moved or replaced"))
	}
	if _, err := fsStat(ctx, api, id, src); err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: %s", src))
		}
		return nil, err
	}
	parentThere, err := fsCheckAncestor(ctx, api, id, path.Dir(dst))
	if err != nil {
		return nil, err
	}
	if !parentThere {
		if err := fsExec(ctx, api, id, "mkdir", "-p", "--", path.Dir(dst)); err != nil {
			return nil, err
		}
	}
	if err := fsExec(ctx, api, id, "mv", "-T", "--", src, dst); err != nil {
		return nil, err
	}
	e, err := fsStat(ctx, api, id, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: e}), nil
}

// Remove removes the file or directory tree at path (rm -rf: nothing
// there is no error, as envd's RemoveAll). /workspace and /tmp themselves
// are refused.
func (s *fsService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	api, id, p, err := fsTarget(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if fsArea(p) {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s itself cannot be removed", p))
	}
	there, err := fsCheckAncestor(ctx, api, id, path.Dir(p))
	if err != nil {
		return nil, err
	}
	if !there {
		return connect.NewResponse(&fspb.RemoveResponse{}), nil // nothing to remove
	}
	if err := fsExec(ctx, api, id, "rm", "-rf", "--", p); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}
