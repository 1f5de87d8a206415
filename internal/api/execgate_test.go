package api

import (
	"slices"
	"testing"
)

// Only a cmd the shell would run as exactly its words is run as argv.
func TestPlainCmd(t *testing.T) {
	for line, want := range map[string][]string{
		"curl --version":          {"curl", "--version"},
		"curl  -sS https://x/a=b": {"curl", "-sS", "https://x/a=b"},
		"curl --version\nid":      nil,
		"curl --version; id":      nil,
		"c''url":                  nil,
		"curl $HOME":              nil,
		"curl ~/x":                nil,
		"A=b curl":                nil,
		"curl *":                  nil,
		"curl >/tmp/x":            nil,
		"curl # x":                nil,
	} {
		call := &execCall{line: line}
		call.req.Argv = []string{"/bin/sh", "-c", line}
		got, ok := plainCmd(call)
		if ok != (want != nil) || !slices.Equal(got, want) {
			t.Errorf("plainCmd(%q) = %q %v, want %q", line, got, ok, want)
		}
	}
	if _, ok := plainCmd(&execCall{line: "curl x"}); ok {
		t.Error("an argv exec was taken for a cmd")
	}
	if got := quoteArgv([]string{"curl", "-d", "a b", "it's"}); got != `curl -d 'a b' 'it'\''s'` {
		t.Errorf("quoteArgv = %s", got)
	}
}
