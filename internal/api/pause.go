package api

import (
	"net/http"
)

// pauseSandbox freezes a running sandbox (no CPU; memory, files and
// processes kept) and answers it, now paused. 409 while commands or file
// copies are in flight, or when it has ended; 503 on a backend that
// cannot pause. Pausing a paused sandbox is 200 too.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, who principal) error {
	return s.pauseOrResume(w, r, who, true)
}

// resumeSandbox thaws a paused sandbox and answers it, now running;
// resuming a running one is 200 too.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, who principal) error {
	return s.pauseOrResume(w, r, who, false)
}

func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, who principal, pause bool) error {
	id := r.PathValue("id")
	if _, err := s.sandboxOf(r.Context(), who, id); err != nil {
		return err
	}
	var err error
	if pause {
		err = s.m.Pause(r.Context(), who.Name, id)
	} else {
		err = s.m.Resume(r.Context(), who.Name, id)
	}
	if err != nil {
		return s.notRunning(r, id, err)
	}
	info, err := s.m.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view(info))
	return nil
}
