package control

import (
	"net/http"

	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// E2B's volumes are the native API's named volumes (docs/http-api.md,
// Volumes): an ext4 filesystem with a hard quota, mounted in one running
// sandbox at a time. E2B's create names no size; every volume made here
// has defaultVolumeSize (sparse: it takes disk as it fills). The volume id
// is its name. E2B's volume-content API (reading a volume's files without
// a sandbox) is not served: its token is never issued.

// defaultVolumeSize is the quota of a volume made through E2B's API.
const defaultVolumeSize = 1 << 30

// volume is E2B's Volume and VolumeAndToken (without a token).
type volume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

func (s *server) createVolume(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	if b.Name == "" {
		return errorf(http.StatusBadRequest, "name is required")
	}
	v, err := p.API.CreateVolume(r.Context(), b.Name, defaultVolumeSize)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volume{v.Name, v.Name})
	return nil
}

func (s *server) listVolumes(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	vs, err := p.API.ListVolumes(r.Context())
	if err != nil {
		return err
	}
	out := make([]volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, volume{v.Name, v.Name})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *server) getVolume(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	v, err := p.API.GetVolume(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volume{v.Name, v.Name})
	return nil
}

func (s *server) deleteVolume(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	if _, err := p.API.DeleteVolume(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
