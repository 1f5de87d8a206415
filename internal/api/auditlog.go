package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
)

const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

func queryInt(r *http.Request, name string, def int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, badRequest(name + " must be a non-negative integer")
	}
	return v, nil
}

func (s *Server) auditTail(w http.ResponseWriter, r *http.Request, who principal) error {
	after, err := queryInt(r, "after", 0)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", defaultAuditLimit)
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = defaultAuditLimit
	}
	limit = min(limit, maxAuditLimit)
	if f := r.URL.Query().Get("follow"); f == "1" || f == "true" {
		return s.auditFollow(w, r, after)
	}
	recs, err := s.log.Tail(r.Context(), after, int(limit))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.AuditPage{Records: views(recs, recordView)})
	return nil
}

// auditFollow streams records as NDJSON until the client goes away.
func (s *Server) auditFollow(w http.ResponseWriter, r *http.Request, after int64) error {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a follow lasts until the client leaves
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return nil
	}
	err := s.log.Follow(r.Context(), after, func(rec audit.Record) error {
		b, err := json.Marshal(recordView(rec))
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return rc.Flush()
	})
	// Follow returns only when it must (never nil): the client left, the
	// log closed, or something failed, which is the one worth a line.
	if !errors.Is(err, context.Canceled) && !errors.Is(err, audit.ErrClosed) && r.Context().Err() == nil {
		s.cfg.Logf("api: audit follow: %v", err)
	}
	return nil
}

func (s *Server) auditVerify(w http.ResponseWriter, r *http.Request, who principal) error {
	res, err := s.log.Verify(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, verificationView(res))
	return nil
}

func (s *Server) auditExport(w http.ResponseWriter, r *http.Request, who principal) error {
	after, err := queryInt(r, "after", 0)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	bw := bufio.NewWriterSize(w, 64<<10)
	if err := s.log.Export(r.Context(), bw, after); err != nil {
		return err // a 500 if nothing was sent yet; otherwise logged only
	}
	return bw.Flush()
}
