package api

import (
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strconv"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// filePath reads and checks ?path=: clean, absolute, under /workspace or
// /tmp. The sandbox checks again and resolves it inside.
func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", badRequest("the path parameter is required")
	}
	if err := checkPath(p); err != nil {
		return "", err
	}
	return p, nil
}

func checkPath(p string) error {
	clean := len(p) > 0 && p[0] == '/'
	if clean {
		for _, base := range []string{"/workspace", "/tmp"} {
			if p == base || len(p) > len(base) && p[:len(base)+1] == base+"/" {
				return cleanPath(p)
			}
		}
	}
	return badRequest(fmt.Sprintf("path %s must be a clean absolute path under /workspace or /tmp", quote(p)))
}

func cleanPath(p string) error {
	// path.Clean would also do, but naming the offending element helps.
	for i, start := 1, 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			switch p[start:i] {
			case "", ".", "..":
				return badRequest(fmt.Sprintf("path %s must be clean: no empty, . or .. elements", quote(p)))
			}
			start = i + 1
		}
	}
	return nil
}

// fileTarget is the sandbox and the path a files request names: the path
// checked first, then the sandbox, which must be one the caller may use.
func (s *Server) fileTarget(r *http.Request, who principal) (id, path string, err error) {
	id = r.PathValue("id")
	if path, err = filePath(r); err != nil {
		return "", "", err
	}
	if _, err := s.sandboxOf(r.Context(), who, id); err != nil {
		return "", "", err
	}
	return id, path, nil
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, who principal) error {
	id, p, err := s.fileTarget(r, who)
	if err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			return badRequest(fmt.Sprintf("mode %s must be octal permission bits such as 0644", quote(m)))
		}
		mode = fs.FileMode(v)
	}
	if r.ContentLength > s.cfg.MaxUploadBytes {
		return &apiError{http.StatusRequestEntityTooLarge, wire.CodeTooLarge, fmt.Sprintf("the upload is over the %d-byte limit", s.cfg.MaxUploadBytes)}
	}
	body := s.uploadOf(w, r)
	if err := s.m.WriteFile(r.Context(), who.Name, id, p, body, mode); err != nil {
		if berr := body.err(); berr != nil {
			return berr // the file was left as it was
		}
		return s.notRunning(r, id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, who principal) error {
	id, p, err := s.fileTarget(r, who)
	if err != nil {
		return err
	}
	if l := r.URL.Query().Get("list"); l == "1" || l == "true" {
		limit, after, err := pageParams(r)
		if err != nil {
			return err
		}
		infos, err := s.m.ListDir(r.Context(), id, p)
		if err != nil {
			return s.notRunning(r, id, err)
		}
		// Entries come sorted by name: a page starts after the cursor's.
		start := 0
		if after != "" {
			start = sort.Search(len(infos), func(i int) bool { return infos[i].Name > after })
		}
		page := infos[start:]
		more := len(page) > limit
		if more {
			page = page[:limit]
		}
		out := wire.FileList{Entries: make([]wire.FileEntry, 0, len(page))}
		for _, fi := range page {
			out.Entries = append(out.Entries, wire.FileEntry{Name: fi.Name, Type: fi.Type, Size: fi.Size,
				Mode: fmt.Sprintf("%04o", fi.Mode.Perm()), MTime: fi.ModTime.UTC()})
		}
		if more {
			out.Next = page[len(page)-1].Name
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	// A download is at most what the sandbox's writable areas can hold: a
	// file that another command keeps growing cannot hold the connection
	// and the daemon forever.
	lim, err := s.m.Limits(id)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	dst := &lazyBody{w: w, left: max(lim.WorkspaceBytes, lim.TmpBytes)}
	if err := s.m.ReadFile(r.Context(), id, p, dst); err != nil {
		if !dst.begun {
			return s.notRunning(r, id, err)
		}
		// Part of the file went out with a 200: cut the connection so the
		// client cannot take the part for the whole.
		s.cfg.Logf("api: reading %s in %s: %v", p, id, err)
		panic(http.ErrAbortHandler)
	}
	if !dst.begun {
		dst.begin() // an empty file
	}
	return nil
}

// lazyBody sends the 200 status with the first byte of a download.
type lazyBody struct {
	w     http.ResponseWriter
	begun bool
	left  int64 // bytes it may still send
}

// errDownloadTooLarge ends a download larger than the sandbox's writable
// areas.
var errDownloadTooLarge = errdefs.New(errdefs.ErrTooLarge, "the file is larger than the sandbox's writable areas (it kept growing while it was read)")

func (b *lazyBody) begin() {
	b.begun = true
	b.w.Header().Set("Content-Type", "application/octet-stream")
	b.w.Header().Set("X-Content-Type-Options", "nosniff")
	b.w.WriteHeader(http.StatusOK)
}

func (b *lazyBody) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, errDownloadTooLarge
	}
	b.left -= int64(len(p))
	if !b.begun {
		b.begin()
	}
	return b.w.Write(p)
}
