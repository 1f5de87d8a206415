package control

import (
	"net/http"
	"strings"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// Snapshots are the native snapshots: a copy of a sandbox's /workspace
// (not its memory or processes). A snapshot id (snap-...) is a template
// id a create may name: the new sandbox runs the source's template with
// /workspace from the snapshot (a native fork).

// snapshotPrefix starts every native snapshot id.
const snapshotPrefix = "snap-"

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotView(sn wire.Snapshot) snapshotInfo {
	return snapshotInfo{SnapshotID: sn.ID, Names: []string{sn.ID}}
}

// snapshot is POST /sandboxes/{id}/snapshots; a name is not kept (the
// snapshot's id is its only name).
func (s *server) snapshot(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	sn, err := p.API.SnapshotSandbox(r.Context(), sb.ID)
	if err != nil {
		return notFound(err, sb.ID)
	}
	writeJSON(w, http.StatusCreated, snapshotView(sn))
	return nil
}

// listSnapshots is GET /snapshots[?sandboxID=]: the caller's snapshots
// (a principal holds a few: the native bound), on one page.
func (s *server) listSnapshots(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	list, err := p.API.ListSnapshots(r.Context())
	if err != nil {
		return err
	}
	from, name := r.URL.Query().Get("sandboxID"), r.URL.Query().Get("name")
	out := []snapshotInfo{}
	for _, sn := range list {
		if (from == "" || sn.Sandbox == from) && (name == "" || sn.ID == name) {
			out = append(out, snapshotView(sn))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteTemplate is DELETE /templates/{id}: the SDKs delete a snapshot
// this way; the operator's templates cannot be deleted.
func (s *server) deleteTemplate(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, snapshotPrefix) {
		return s.noBuilds(w, r, p)
	}
	if err := p.API.DeleteSnapshot(r.Context(), id); err != nil {
		if isNotFound(err) {
			return errorf(http.StatusNotFound, "snapshot %s not found", quote(id))
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// fromSnapshot resolves a create from a snapshot: the caller's snapshot
// id, and the image of the template its source sandbox ran.
func (s *server) fromSnapshot(r *http.Request, p *auth.Principal, id string) (image string, template string, err error) {
	list, err := p.API.ListSnapshots(r.Context())
	if err != nil {
		return "", "", err
	}
	for _, sn := range list {
		if sn.ID != id {
			continue
		}
		src, err := p.API.GetSandbox(r.Context(), sn.Sandbox)
		if err != nil {
			return "", "", err
		}
		tpl := templateOf(src)
		img, ok := s.template(tpl)
		if !ok {
			return "", "", errorf(http.StatusNotFound, "snapshot %s is of template %s, which this daemon no longer serves", id, quote(tpl))
		}
		return img, tpl, nil
	}
	return "", "", errorf(http.StatusNotFound, "template %s not found", quote(id))
}
