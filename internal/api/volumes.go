package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
)

// Volumes is the daemon's named volumes (package volume), as the API uses
// them. principal scopes every call; all (operators) sees everyone's.
type Volumes interface {
	Create(ctx context.Context, principal, name string, size int64) (VolumeInfo, error)
	List(ctx context.Context, principal string, all bool) ([]VolumeInfo, error)
	Get(ctx context.Context, principal, name string, all bool) (VolumeInfo, error)
	Delete(ctx context.Context, principal, name string, all bool) error
}

// VolumeInfo is one volume as the volumes report it.
type VolumeInfo struct {
	Name, Principal string
	SizeBytes       int64
	CreatedAt       time.Time
	Sandbox         string
}

// Audit kinds of the volume routes.
const (
	KindVolumeCreate = "volume.create"
	KindVolumeDelete = "volume.delete"
)

func volumeView(v VolumeInfo) wire.Volume {
	return wire.Volume{Name: v.Name, Principal: v.Principal, SizeBytes: v.SizeBytes, CreatedAt: v.CreatedAt.UTC(), Sandbox: v.Sandbox}
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, who principal) error {
	var b wire.CreateVolumeRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("a volume needs a name and a size")
		}
		return err
	}
	// Written before the volume exists, so no volume is made that the log
	// does not show.
	intent, err := s.log.Begin(r.Context(), audit.Entry{Actor: who.Name, Kind: KindVolumeCreate,
		Data: map[string]any{"name": b.Name, "size_bytes": int64(b.Size)}})
	if err != nil {
		return err
	}
	v, cerr := s.cfg.Volumes.Create(r.Context(), who.Name, b.Name, int64(b.Size))
	s.endIntent(intent, cerr)
	if cerr != nil {
		return cerr
	}
	writeJSON(w, http.StatusCreated, volumeView(v))
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, who principal) error {
	list, err := s.cfg.Volumes.List(r.Context(), who.Name, who.operator())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.VolumeList{Volumes: views(list, volumeView)})
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, who principal) error {
	v, err := s.cfg.Volumes.Get(r.Context(), who.Name, r.PathValue("name"), who.operator())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeView(v))
	return nil
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request, who principal) error {
	name := r.PathValue("name")
	v, err := s.cfg.Volumes.Get(r.Context(), who.Name, name, who.operator())
	if err != nil {
		return err
	}
	intent, err := s.log.Begin(r.Context(), audit.Entry{Actor: who.Name, Kind: KindVolumeDelete,
		Data: map[string]any{"name": name, "principal": v.Principal}})
	if err != nil {
		return err
	}
	derr := s.cfg.Volumes.Delete(r.Context(), who.Name, name, who.operator())
	s.endIntent(intent, derr)
	if derr != nil {
		return derr
	}
	writeJSON(w, http.StatusOK, volumeView(v))
	return nil
}

// endIntent records how an audited action ended, in the background of
// the answer.
func (s *Server) endIntent(intent *audit.Intent, err error) {
	data := map[string]any{"ok": err == nil}
	if err != nil {
		data["error"] = err.Error()
	}
	logErr := func(err error) { s.cfg.Logf("api: audit of an action's end: %v", err) }
	if qerr := intent.EndQueued(data, logErr); qerr != nil {
		logErr(qerr)
	}
}
