package api

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ironclaw/ironclaw/internal/session"
)

type metrics struct {
	creates  *prometheus.CounterVec
	ends     *prometheus.CounterVec
	execDur  prometheus.Histogram
	exits    *prometheus.CounterVec
	requests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, m *session.Manager) (*metrics, error) {
	met := &metrics{
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ironclaw_sandbox_creates_total", Help: "Sandbox creations through the API, by result (ok or error).",
		}, []string{"result"}),
		ends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ironclaw_sandbox_ends_total", Help: "Sandboxes that ended, by final state and reason.",
		}, []string{"state", "reason"}),
		execDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ironclaw_exec_duration_seconds", Help: "Wall time of commands run through the API.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ironclaw_exec_exits_total", Help: "Commands run through the API, by exit code (0-255, else other).",
		}, []string{"code"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ironclaw_api_requests_total", Help: "API requests, by route pattern and status code.",
		}, []string{"route", "code"}),
	}
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ironclaw_sandboxes_active", Help: "Sandboxes running now.",
	}, func() float64 { return float64(m.Running()) })
	for _, c := range []prometheus.Collector{active, met.creates, met.ends, met.execDur, met.exits, met.requests} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"ok", "error"} {
		met.creates.WithLabelValues(r)
	}
	return met, nil
}

func (m *metrics) request(route, code string) { m.requests.WithLabelValues(route, code).Inc() }

func (m *metrics) created(err error) {
	if err != nil {
		m.creates.WithLabelValues("error").Inc()
		return
	}
	m.creates.WithLabelValues("ok").Inc()
}

func (m *metrics) exited(code int, d time.Duration) {
	m.execDur.Observe(d.Seconds())
	m.exits.WithLabelValues(exitLabel(code)).Inc()
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
func (m *metrics) ended(state, reason string) {
	switch state {
	case session.StateDestroyed, session.StateReaped, session.StateLost:
	default:
		state = "other"
	}
	m.ends.WithLabelValues(state, endReason(state, reason)).Inc()
}

func endReason(state, reason string) string {
	r := strings.ToLower(reason)
	switch {
	case state == session.StateReaped && (r == "ttl" || r == "idle"):
		return r
	case state == session.StateLost:
		return "daemon_restart"
	case strings.Contains(r, "shut down") || strings.Contains(r, "shutdown"):
		return "shutdown"
	case strings.HasPrefix(r, "destroyed by"), r == "destroy":
		return "destroy"
	case r == "ttl", r == "idle":
		return r
	}
	return "other"
}
