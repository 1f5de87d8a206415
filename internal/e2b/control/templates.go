package control

import (
	"net/http"
	"time"

	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/envd"
)

// Templates are the operator's: serve --e2b-template ALIAS=IMAGE maps an
// alias onto a native image, and "base" is the host-toolchain view unless
// mapped. Nothing is built here.

// templateJSON is E2B's Template, for GET /templates.
type templateJSON struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *string    `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int        `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

func (s *server) listTemplates(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	out := []templateJSON{}
	for _, id := range s.templateIDs() {
		// The sizes are the daemon's defaults' business, not the
		// template's: E2B's minimums are reported.
		out = append(out, templateJSON{TemplateID: id, BuildID: id, CPUCount: 1, MemoryMB: 128, DiskSizeMB: 0,
			Aliases: []string{id}, Names: []string{id}, CreatedAt: s.started, UpdatedAt: s.started,
			EnvdVersion: envd.Version, BuildStatus: "ready"})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// alias is GET /templates/aliases/{alias}: 200 for a template a create
// accepts, else 404 (the SDKs' Template.exists).
func (s *server) alias(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	a := r.PathValue("alias")
	if _, ok := s.template(a); !ok {
		return errorf(http.StatusNotFound, "template %s not found", quote(a))
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": a, "public": false})
	return nil
}

// noBuilds answers the template build and edit routes.
func (s *server) noBuilds(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	return errorf(http.StatusNotImplemented, "template builds are not supported; an operator maps an image with serve --e2b-template ALIAS=IMAGE, and a create names that alias (or \"base\")")
}

// notServed answers the E2B routes IronClaw does not serve.
func (s *server) notServed(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	return errorf(http.StatusNotImplemented, "%s %s is not supported by IronClaw's E2B-compatible API", r.Method, r.Pattern)
}
