package daemon

import (
	"time"

	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// apiBodyLimits bounds how slowly request bodies may reach the API: a
// stalled body fails after two minutes without a byte, and a body must
// average 4 KiB/s beyond its first two minutes of waiting, so the largest
// upload (256 MiB) may take about 18 hours but cannot be held open for
// nothing. Only time spent waiting for the client counts, and the read
// deadline is cleared at the end of the body: exec and audit streams are
// not cut. Routes may tighten it with netlimit.LimitBody.
var apiBodyLimits = netlimit.BodyLimits{Timeout: 2 * time.Minute, MinRate: 4 << 10, Idle: 2 * time.Minute}

// raiseFileLimit raises the descriptor limit and reports what the servers
// inside sandboxes may hold.
func raiseFileLimit(logf func(string, ...any)) {
	soft, err := netlimit.RaiseFileLimit()
	if err != nil {
		logf("warning: raising the open-file limit: %v", err)
	}
	logf("open-file limit %d: up to %d connections from all sandboxes", soft, netlimit.Process().Max())
}
