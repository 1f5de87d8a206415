package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
)

// KindSandboxLifetime is the audit kind of a lifetime change (POST
// /v1/sandboxes/{id}/lifetime): the intent is durable before the change.
const KindSandboxLifetime = "sandbox.lifetime"

// setLifetime gives a running or paused sandbox a new TTL, counted from
// now, and/or a new idle timeout. An agent is held to the operator's
// ceiling (policy limits.max.ttl and .idle) as at create, but refused
// rather than clamped: the caller asked for a definite deadline, and a
// silently shorter one would end its sandbox early.
func (s *Server) setLifetime(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	info, err := s.sandboxOf(r.Context(), who, id)
	if err != nil {
		return err
	}
	var b wire.LifetimeRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("give a ttl, an idle timeout, or both")
		}
		return err
	}
	ttl, idle := time.Duration(b.TTL), time.Duration(b.Idle)
	if ttl == 0 && idle == 0 {
		return badRequest("give a ttl, an idle timeout, or both")
	}
	if c := s.cfg.Ceiling; c != nil && !who.operator() {
		if c.TTL > 0 && ttl > c.TTL {
			return badRequest(fmt.Sprintf("ttl %s is above the operator's ceiling of %s (policy limits.max.ttl)", ttl, c.TTL))
		}
		if c.Idle > 0 && idle > c.Idle {
			return badRequest(fmt.Sprintf("idle %s is above the operator's ceiling of %s (policy limits.max.idle)", idle, c.Idle))
		}
	}
	data := map[string]any{}
	var fromCreation time.Duration
	if ttl > 0 {
		now := time.Now()
		fromCreation = now.Sub(info.CreatedAt) + ttl
		data["ttl"] = ttl.String()
		data["expires_at"] = now.Add(ttl).UTC().Format(time.RFC3339)
	}
	if idle > 0 {
		data["idle"] = idle.String()
	}
	intent, err := s.log.Begin(r.Context(), audit.Entry{Session: id, Actor: who.Name, Kind: KindSandboxLifetime, Data: data})
	if err != nil {
		return err
	}
	serr := s.m.SetLifetime(r.Context(), id, fromCreation, idle)
	s.endIntent(intent, serr)
	if serr != nil {
		return s.notRunning(r, id, serr)
	}
	info, err = s.m.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(info))
	return nil
}

// sandboxStats answers a running or paused sandbox's resource use and
// limits.
func (s *Server) sandboxStats(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	info, err := s.sandboxOf(r.Context(), who, id)
	if err != nil {
		return err
	}
	st, l, err := s.m.Stats(r.Context(), id)
	if err != nil {
		return s.notRunning(r, id, err)
	}
	writeJSON(w, http.StatusOK, wire.SandboxStats{
		ID: id, State: info.State, At: time.Now().UTC(), Uptime: wire.Duration(time.Since(info.CreatedAt).Round(time.Millisecond)),
		MemoryBytes: st.MemoryBytes, MemoryPeakBytes: st.MemoryPeakBytes, CPUSeconds: st.CPUUsage.Seconds(),
		Pids: st.Pids, OOMKills: st.OOMKills,
		MemoryLimitBytes: l.MemoryBytes, CPUs: l.CPUs, PidsLimit: l.Pids, WorkspaceBytes: l.WorkspaceBytes,
	})
	return nil
}
