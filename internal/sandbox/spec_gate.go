package sandbox

import (
	"fmt"
	"strings"
)

// MaxGate bounds Spec.Gate (package gate checks each entry fully).
const MaxGate = 64

func validGate(entries []string) error {
	if len(entries) > MaxGate {
		return fmt.Errorf("%d programs is more than the %d allowed", len(entries), MaxGate)
	}
	for _, e := range entries {
		if e == "" || len(e) > 4096 || strings.ContainsAny(e, "\x00\n") {
			return fmt.Errorf("%q is not a program name or path", e)
		}
	}
	return nil
}
