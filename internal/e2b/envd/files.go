package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// GET and POST /files: envd's file download and upload, over the native
// API's GET and PUT .../files. Signed URLs are checked by the root
// (package e2b) before a request gets here. Paths resolve as the
// filesystem service's (fsResolve). Users "user", "root", "sandbox" and
// none are accepted: everything runs as the sandbox's uid 65532.
//
// An upload is streamed to the native PUT part by part, never held here:
// the native upload limit (daemon --max-upload, 256 MiB by default) is
// per file, and a file over it is 413. Each native PUT is atomic, so a
// file cut short is left as it was. Errors are envd's JSON,
// {"code": <status>, "message": "..."}.

// filesMaxParts bounds the parts of one multipart upload.
const filesMaxParts = 1000

type filesHandler struct{ cfg Config }

// filesEntry is envd's answer for an uploaded file.
type filesEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// filesError writes envd's error body.
func filesError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// filesFail answers err: a native error with its status and message, a
// Connect error (a path refused) with the matching status.
func filesFail(w http.ResponseWriter, err error) {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status >= 400 {
		filesError(w, ce.Status, ce.Message)
		return
	}
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		status := http.StatusInternalServerError
		switch cerr.Code() {
		case connect.CodeInvalidArgument:
			status = http.StatusBadRequest
		case connect.CodeNotFound:
			status = http.StatusNotFound
		case connect.CodeUnauthenticated:
			status = http.StatusUnauthorized
		case connect.CodePermissionDenied:
			status = http.StatusForbidden
		}
		filesError(w, status, cerr.Message())
		return
	}
	filesError(w, http.StatusInternalServerError, err.Error())
}

// filesCaller is the native client and sandbox of the request, after
// checking its username parameter.
func filesCaller(w http.ResponseWriter, r *http.Request) (*client.Client, string, bool) {
	p, id := auth.PrincipalFrom(r.Context()), auth.SandboxFrom(r.Context())
	if p == nil || id == "" {
		filesError(w, http.StatusUnauthorized, "the sandbox's access token (X-Access-Token) or a signed URL is required")
		return nil, "", false
	}
	switch u := r.URL.Query().Get("username"); u {
	case "", "user", "root", "sandbox":
	default:
		filesError(w, http.StatusUnauthorized, fmt.Sprintf("unknown user %q: a sandbox knows user and root, both its uid 65532", u))
		return nil, "", false
	}
	return p.API, id, true
}

func (f *filesHandler) download(w http.ResponseWriter, r *http.Request) {
	api, id, ok := filesCaller(w, r)
	if !ok {
		return
	}
	p, err := fsResolve(r.URL.Query().Get("path"))
	if err != nil {
		filesFail(w, err)
		return
	}
	dst := &filesBody{w: w, name: path.Base(p)}
	if err := api.GetFile(r.Context(), id, p, dst); err != nil {
		if !dst.begun {
			filesFail(w, err)
			return
		}
		// Part of the file went out with a 200: cut the connection so that
		// the client cannot take the part for the whole.
		f.cfg.Logf("envd: reading %s in %s: %v", p, id, err)
		panic(http.ErrAbortHandler)
	}
	if !dst.begun {
		dst.begin() // an empty file
	}
}

// filesBody sends the download's headers and 200 with its first byte.
type filesBody struct {
	w     http.ResponseWriter
	name  string
	begun bool
}

func (b *filesBody) begin() {
	b.begun = true
	h := b.w.Header()
	ct := mime.TypeByExtension(path.Ext(b.name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": b.name}))
	h.Set("X-Content-Type-Options", "nosniff")
	b.w.WriteHeader(http.StatusOK)
}

func (b *filesBody) Write(p []byte) (int, error) {
	if !b.begun {
		b.begin()
	}
	return b.w.Write(p)
}

func (f *filesHandler) upload(w http.ResponseWriter, r *http.Request) {
	api, id, ok := filesCaller(w, r)
	if !ok {
		return
	}
	for name := range r.Header {
		if strings.HasPrefix(name, "X-Metadata-") {
			// envd 0.6.2 keeps these in xattrs; the SDKs send them only to
			// a newer envd than Version, so this is a client that assumed.
			filesError(w, http.StatusBadRequest, "file metadata (X-Metadata-* headers) is not supported here")
			return
		}
	}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		// The native upload limit bounds what it inflates to.
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			filesError(w, http.StatusBadRequest, "the gzip body is not valid: "+err.Error())
			return
		}
		defer zr.Close()
		body = zr
	default:
		filesError(w, http.StatusBadRequest, fmt.Sprintf("unsupported Content-Encoding %q: gzip or none", enc))
		return
	}
	ct := r.Header.Get("Content-Type")
	mt, params, _ := mime.ParseMediaType(ct)
	var out []filesEntry
	switch {
	case mt == "application/octet-stream":
		q := r.URL.Query().Get("path")
		if q == "" {
			filesError(w, http.StatusBadRequest, "the path query parameter is required for a raw body upload")
			return
		}
		p, err := fsResolve(q)
		if err != nil {
			filesFail(w, err)
			return
		}
		if err := api.PutFile(r.Context(), id, p, body, 0); err != nil {
			filesFail(w, err)
			return
		}
		out = append(out, filesEntry{Name: path.Base(p), Type: "file", Path: p})
	case strings.HasPrefix(mt, "multipart/") && params["boundary"] != "":
		var err error
		if out, err = f.multipart(r, api, id, multipart.NewReader(body, params["boundary"])); err != nil {
			filesFail(w, err)
			return
		}
	default:
		filesError(w, http.StatusBadRequest, fmt.Sprintf("unsupported content type %q, expected multipart/form-data or application/octet-stream", ct))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(out)
}

// multipart writes each part named "file" to the query's path or, without
// one, to the part's file name (a full path, as the SDKs send it); two
// parts for one path are refused, as envd does (the first is written).
func (f *filesHandler) multipart(r *http.Request, api *client.Client, id string, mr *multipart.Reader) ([]filesEntry, error) {
	out := []filesEntry{}
	seen := map[string]bool{}
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reading the multipart body: %w", err))
		}
		if n >= filesMaxParts {
			part.Close()
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("more than %d parts in one upload", filesMaxParts))
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		target := r.URL.Query().Get("path")
		if target == "" {
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			target = dp["filename"]
			if target == "" {
				part.Close()
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a file part needs a path: the path query parameter or the part's filename"))
			}
		}
		p, err := fsResolve(target)
		if err != nil {
			part.Close()
			return nil, err
		}
		if seen[p] {
			part.Close()
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("you cannot upload multiple files to the same path '%s' in one upload request, only the first specified file was uploaded", p))
		}
		seen[p] = true
		err = api.PutFile(r.Context(), id, p, part, 0)
		part.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, filesEntry{Name: path.Base(p), Type: "file", Path: p})
	}
}
