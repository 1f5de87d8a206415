package api

import (
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/metrics"
	"github.com/ironclaw/ironclaw/internal/session"
)

type apiMetrics struct {
	creates  *metrics.CounterVec
	ends     *metrics.CounterVec
	execDur  *metrics.Histogram
	exits    *metrics.CounterVec
	requests *metrics.CounterVec
}

func newMetrics(reg *metrics.Registry, m *session.Manager) (*apiMetrics, error) {
	met := &apiMetrics{}
	var err error
	vec := func(name, help string, labels ...string) *metrics.CounterVec {
		var v *metrics.CounterVec
		if err == nil {
			v, err = reg.CounterVec(name, help, labels...)
		}
		return v
	}
	met.creates = vec("ironclaw_sandbox_creates_total", "Sandbox creations through the API, by result (ok or error).", "result")
	met.ends = vec("ironclaw_sandbox_ends_total", "Sandboxes that ended, by final state and reason.", "state", "reason")
	met.exits = vec("ironclaw_exec_exits_total", "Commands run through the API, by exit code (0-255, else other).", "code")
	met.requests = vec("ironclaw_api_requests_total", "API requests, by route pattern and status code.", "route", "code")
	if err != nil {
		return nil, err
	}
	if met.execDur, err = reg.Histogram("ironclaw_exec_duration_seconds", "Wall time of commands run through the API.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}); err != nil {
		return nil, err
	}
	if err := reg.GaugeFunc("ironclaw_sandboxes_active", "Sandboxes running now.",
		func() float64 { return float64(m.Running()) }); err != nil {
		return nil, err
	}
	for _, r := range []string{"ok", "error"} {
		met.creates.With(r)
	}
	return met, nil
}

func (m *apiMetrics) request(route, code string) { m.requests.With(route, code).Inc() }

func (m *apiMetrics) created(err error) {
	if err != nil {
		m.creates.With("error").Inc()
		return
	}
	m.creates.With("ok").Inc()
}

func (m *apiMetrics) exited(code int, d time.Duration) {
	m.execDur.Observe(d.Seconds())
	m.exits.With(exitLabel(code)).Inc()
}

func exitLabel(code int) string {
	if code < 0 || code > 255 {
		return "other"
	}
	return strconv.Itoa(code)
}

// ended counts a sandbox end. Reasons are free text in the session
// package (they may name a daemon run), so they are folded into a few
// values to bound the label's cardinality.
func (m *apiMetrics) ended(state, reason string) {
	switch state {
	case session.StateDestroyed, session.StateReaped, session.StateLost, session.StateCrashed:
	default:
		state = "other"
	}
	m.ends.With(state, endReason(state, reason)).Inc()
}

func endReason(state, reason string) string {
	r := strings.ToLower(reason)
	switch {
	case state == session.StateReaped && (r == "ttl" || r == "idle"):
		return r
	case state == session.StateLost:
		return "daemon_restart"
	case state == session.StateCrashed && strings.Contains(r, "oom killer"):
		return "oom"
	case state == session.StateCrashed:
		return "pid1_died"
	case strings.Contains(r, "shut down") || strings.Contains(r, "shutdown"):
		return "shutdown"
	case strings.HasPrefix(r, "destroyed by"), r == "destroy":
		return "destroy"
	case r == "ttl", r == "idle":
		return r
	}
	return "other"
}
