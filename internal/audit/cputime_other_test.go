//go:build !unix

package audit

import "time"

// processCPU is unknown here; benchmarks then report 0 CPU per op.
func processCPU() time.Duration { return 0 }
