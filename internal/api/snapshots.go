package api

import (
	"fmt"
	"net/http"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/session"
)

func snapshotView(in session.SnapshotInfo) wire.Snapshot {
	return wire.Snapshot{ID: in.ID, Sandbox: in.Sandbox, CreatedAt: utc(in.CreatedAt), Bytes: in.Bytes,
		Files: in.Files, Dirs: in.Dirs, Skipped: in.Skipped}
}

// snapshotOf describes snapshot id if who may use it: an agent only its
// own; another's is not found, like an id that never existed.
func (s *Server) snapshotOf(who principal, id string) (session.SnapshotInfo, error) {
	in, err := s.m.GetSnapshot(id)
	if err != nil {
		return session.SnapshotInfo{}, err
	}
	if !who.operator() && in.Principal != who.Name {
		return session.SnapshotInfo{}, fmt.Errorf("%w: %s", session.ErrSnapshotNotFound, id)
	}
	return in, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if _, err := s.sandboxOf(r.Context(), who, id); err != nil {
		return err
	}
	in, err := s.m.Snapshot(r.Context(), who.Name, id)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	writeJSON(w, http.StatusCreated, snapshotView(in))
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, who principal) error {
	principal := who.Name
	if who.operator() {
		principal = ""
	}
	list, err := s.m.ListSnapshots(principal)
	if err != nil {
		return err
	}
	out := wire.SnapshotList{Snapshots: []wire.Snapshot{}}
	for _, in := range list {
		out.Snapshots = append(out.Snapshots, snapshotView(in))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, who principal) error {
	in, err := s.snapshotOf(who, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshotView(in))
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if _, err := s.snapshotOf(who, id); err != nil {
		return err
	}
	if err := s.m.DeleteSnapshot(r.Context(), who.Name, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
