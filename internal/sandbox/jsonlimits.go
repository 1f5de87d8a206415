package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Duration is a duration as the HTTP API and approval payloads write it:
// a Go duration string ("30s", "1h30m"), never negative. It encodes the
// same way, so a decoded body re-encodes to something that decodes again.
type Duration time.Duration

// MarshalJSON writes the string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a non-negative duration string; null leaves d as it
// is.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration must be a string such as "30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %v", s, err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// Bytes is a byte count as the HTTP API and approval payloads write it: a
// whole non-negative number, or a string ParseBytes reads ("256M"). It
// encodes as a number.
type Bytes int64

// UnmarshalJSON reads a number or a size string; null leaves z as it is.
func (z *Bytes) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := ParseBytes(s)
		if err != nil {
			return err
		}
		*z = Bytes(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return errors.New(`a size must be a number of bytes or a string such as "256M"`)
	}
	if f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return fmt.Errorf("size %s must be a whole, non-negative number of bytes", b)
	}
	*z = Bytes(f)
	return nil
}
