// Package flagtypes holds the flag types every ironclaw command shares, so
// that one kind of value is spelled, checked and shown the same way in the
// light commands (package cli) and in those only ironclaw-full links
// (package cli/full).
package flagtypes

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/spf13/pflag"
)

// Durations are Go durations ("30s", "1m30s", "2h", "0"), as in the policy
// file and the HTTP API. A bare number other than 0 is refused: "30" could
// mean seconds or milliseconds, and a wrong guess at a timeout is worse
// than an error.
//
// Negative values are refused, except by the flags of settings that can
// be turned off (the daemon's rule, see daemon.Config: 0 is the default, a
// negative value is none). Those take "off" (or "none", or any negative
// value, a bare -1 included), which is stored as -1 and shown as "off".

// IsOff reports whether s spells "none" for a flag that can be off.
func IsOff(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "off" || s == "none"
}

// Value is every flag type of this package.
type Value interface {
	pflag.Value
	// CanBeOff reports whether the flag takes "off" (stored as -1).
	CanBeOff() bool
	// SetNone stores -1, what "off" stores, even in a flag that refuses
	// it: for checking that the daemon reads -1 as the flag does.
	SetNone()
}

var (
	_ Value = (*durationValue)(nil)
	_ Value = (*intValue[int])(nil)
	_ Value = (*rateValue)(nil)
	_ Value = (*sizeValue)(nil)
)

func (d *durationValue) CanBeOff() bool { return d.off }
func (d *durationValue) SetNone()       { *d.p = -1 }
func (v *intValue[T]) CanBeOff() bool   { return v.off }
func (v *intValue[T]) SetNone()         { *v.p = -1 }
func (r *rateValue) CanBeOff() bool     { return false }
func (r *rateValue) SetNone()           { *r.p = -1 }
func (z *sizeValue) CanBeOff() bool     { return z.off }
func (z *sizeValue) SetNone()           { *z.p = -1 }

// errNegative is what a flag that cannot be off says about -1.
var errNegative = errors.New("must not be negative")

// durationValue is every duration flag.
type durationValue struct {
	p   *time.Duration
	off bool // negative durations and "off" allowed: none
}

func (d *durationValue) Set(s string) error {
	if d.off && IsOff(s) {
		*d.p = -1
		return nil
	}
	if n, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && n < 0 && d.off {
		*d.p = -1 // -1, as for the counts: none, whatever the unit
		return nil
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 && !d.off {
		return errNegative
	}
	if v < 0 {
		v = -1
	}
	*d.p = v
	return nil
}

// ParseDuration reads a Go duration; a bare number other than 0 is
// refused with an example.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	v, err := time.ParseDuration(s)
	if err == nil {
		return v, nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return 0, fmt.Errorf("%q has no unit: write a duration such as %ss, 1m30s or 2h", s, s)
	}
	return 0, fmt.Errorf("%q is not a duration such as 30s, 1m30s or 2h", s)
}

func (d *durationValue) String() string {
	switch {
	case d.p == nil || *d.p == 0:
		return "0" // as pflag's own, so help shows no default of 0
	case *d.p < 0:
		return "off"
	}
	return ShortDuration(*d.p)
}

// ShortDuration is d as Go writes it without the zero tail: 30m, not
// 30m0s; 24h, not 24h0m0s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Type is pflag's: "duration", so FlagSet.GetDuration reads these flags.
func (d *durationValue) Type() string { return "duration" }

// Duration defines a duration flag that refuses negative values.
func Duration(f *pflag.FlagSet, p *time.Duration, name, short string, def time.Duration, usage string) {
	*p = def
	f.VarP(&durationValue{p: p}, name, short, usage)
}

// DurationOff defines a duration flag whose setting can be off.
func DurationOff(f *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var(&durationValue{p: p, off: true}, name, usage)
}

// intValue is every integer flag of a daemon setting.
type intValue[T int | int64] struct {
	p   *T
	off bool
}

func (v *intValue[T]) Set(s string) error {
	if v.off && IsOff(s) {
		*v.p = -1
		return nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64)
	if err != nil || int64(T(n)) != n {
		return fmt.Errorf("%q is not a whole number", s)
	}
	switch {
	case n < 0 && !v.off:
		return errNegative
	case n < 0:
		n = -1
	}
	*v.p = T(n)
	return nil
}

func (v *intValue[T]) String() string {
	if v.p == nil {
		return "0"
	}
	if *v.p < 0 {
		return "off"
	}
	return strconv.FormatInt(int64(*v.p), 10)
}

// Type is pflag's ("int" or "int64"), so FlagSet.GetInt and GetInt64
// read these flags.
func (v *intValue[T]) Type() string {
	var z T
	if _, ok := any(z).(int); ok {
		return "int"
	}
	return "int64"
}

// Int defines an integer flag that refuses negative values.
func Int[T int | int64](f *pflag.FlagSet, p *T, name string, def T, usage string) {
	*p = def
	f.Var(&intValue[T]{p: p}, name, usage)
}

// IntOff defines an integer flag whose setting can be off.
func IntOff[T int | int64](f *pflag.FlagSet, p *T, name string, def T, usage string) {
	*p = def
	f.Var(&intValue[T]{p: p, off: true}, name, usage)
}

// rateValue is a float flag that takes neither negative values nor NaN
// or infinities.
type rateValue struct{ p *float64 }

func (r *rateValue) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%q is not a number", s)
	}
	if v < 0 {
		return errNegative
	}
	*r.p = v
	return nil
}

func (r *rateValue) String() string {
	if r.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*r.p, 'g', -1, 64)
}

func (r *rateValue) Type() string { return "float64" }

// Rate defines a rate (a float) flag.
func Rate(f *pflag.FlagSet, p *float64, name string, def float64, usage string) {
	*p = def
	f.Var(&rateValue{p: p}, name, usage)
}

// sizeValue is every byte-size flag of a daemon setting: a number with an
// optional binary suffix ("1M", "256MiB", "1.5G"; K is 1024), as in the
// policy file. It keeps the text as given for String, and its Type is
// "string", so FlagSet.GetString reads it as the text; the usage's
// `size` names it in the help.
type sizeValue struct {
	p    *int64
	text string
	off  bool
}

func (z *sizeValue) Set(s string) error {
	t := strings.TrimSpace(s)
	switch {
	case z.off && (IsOff(t) || strings.HasPrefix(t, "-")):
		if !IsOff(t) {
			if _, err := sandbox.ParseBytes(t[1:]); err != nil {
				return err
			}
		}
		*z.p, z.text = -1, "off"
		return nil
	case t == "" || t == "0":
		*z.p, z.text = 0, t
		return nil
	}
	n, err := sandbox.ParseBytes(t)
	if err != nil {
		return err
	}
	*z.p, z.text = n, t
	return nil
}

func (z *sizeValue) String() string { return z.text }
func (z *sizeValue) Type() string   { return "string" }

// Size defines a size flag that refuses negative values.
func Size(f *pflag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	f.Var(&sizeValue{p: p, text: sandbox.FormatBytes(def)}, name, usage)
}

// SizeOff defines a size flag whose setting can be off.
func SizeOff(f *pflag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	f.Var(&sizeValue{p: p, text: sandbox.FormatBytes(def), off: true}, name, usage)
}

// ParsePort reads a TCP port, 1-65535.
func ParsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: want 1-65535", s)
	}
	return n, nil
}
