package daemon

import (
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// apiBodyLimits bounds how slowly request bodies may reach the API, on
// every route: a stalled body fails after timeout without a byte, and a
// body must average 4 KiB/s beyond its first timeout of waiting, so the
// largest upload (256 MiB) may take hours but cannot be held open for
// nothing. Only time spent waiting for the client counts, and the read
// deadline is cleared at the end of the body: exec and audit streams are
// not cut. The API's routes tighten it with netlimit.LimitBody (a JSON body
// must arrive within timeout in all).
func apiBodyLimits(timeout time.Duration) netlimit.BodyLimits {
	return netlimit.BodyLimits{Timeout: timeout, MinRate: defaults.BodyMinRate, Idle: timeout}
}

// raiseFileLimit raises the descriptor limit and reports what the servers
// inside sandboxes may hold.
func raiseFileLimit(logf func(string, ...any)) {
	soft, err := netlimit.RaiseFileLimit()
	if err != nil {
		logf("warning: raising the open-file limit: %v", err)
	}
	logf("open-file limit %d: up to %d connections from all sandboxes", soft, netlimit.Process().Max())
}
