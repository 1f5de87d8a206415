package sandbox

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseBytes parses a size such as "256M", "1.5GiB", "4096" or "64k".
// Suffixes are binary (K = 1024); an optional trailing "B" or "iB" is accepted.
func ParseBytes(s string) (int64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty size")
	}
	num := strings.TrimRight(in, "kKmMgGtTiIbB")
	unit := strings.ToUpper(in[len(num):])
	switch {
	case len(unit) == 3 && strings.HasSuffix(unit, "IB"):
		unit = unit[:1]
	case len(unit) == 2 && unit[1] == 'I' && unit[0] != 'B':
		unit = unit[:1]
	case len(unit) == 2 && strings.HasSuffix(unit, "B"), unit == "B":
		unit = unit[:len(unit)-1]
	}
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
	if mult == 0 || len(unit) > 1 {
		return 0, fmt.Errorf("size %q: unknown unit (use K, M, G or T)", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("size %q is not a number with an optional unit", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// FormatBytes renders n in the largest binary unit that keeps it readable.
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	i := 0
	for math.Abs(f) >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == math.Trunc(f) {
		return fmt.Sprintf("%d%s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f%s", f, units[i])
}
