package store

import (
	"fmt"
	"strings"
	"testing"
)

func TestSizeAndWarnings(t *testing.T) {
	s := openTemp(t)
	n0, err := s.Size()
	if err != nil || n0 <= 0 {
		t.Fatalf("Size = %d, %v", n0, err)
	}
	if _, err := s.DB().Exec(`CREATE TABLE pad (b BLOB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`INSERT INTO pad VALUES (zeroblob(1000000))`); err != nil {
		t.Fatal(err)
	}
	n1, _ := s.Size()
	if n1 < n0+1000000 {
		t.Fatalf("Size after 1 MB: %d (was %d)", n1, n0)
	}
	if free, err := s.FreeBytes(); err != nil || free <= 0 {
		t.Fatalf("FreeBytes = %d, %v", free, err)
	}
	var logs []string
	w := SizeWatch{Threshold: 400_000, Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}
	next := s.checkSize(n1, w.Threshold, w)
	if len(logs) != 1 || !strings.Contains(logs[0], "WARNING") || next <= n1 {
		t.Fatalf("past the threshold: %q, next %d", logs, next)
	}
	if s.checkSize(n1, next, w); len(logs) != 1 {
		t.Fatalf("warned again without growth: %q", logs)
	}
	if s.checkSize(100, next, w) != w.Threshold || len(logs) != 2 || !strings.Contains(logs[1], "back below") {
		t.Fatalf("below again: %q", logs)
	}
}
