package secrets

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// FuzzSwap feeds Swap what a sandbox controls: header names and values,
// with or without its placeholders, in plain text or Basic credentials,
// for a host the secret is for or another. Properties: no panic; a
// request without a placeholder is untouched; a refused one is untouched;
// the value goes only to the secret's host; no placeholder of a swapped
// secret is left behind.
func FuzzSwap(f *testing.F) {
	k := newKit(f)
	if _, err := k.st.Set(context.Background(), "operator", Meta{Name: "gh", Hosts: []string{"api.test"}, Grant: GrantAll}, []byte(testValue)); err != nil {
		f.Fatal(err)
	}
	g, err := NewGrants(GrantsOptions{Store: k.st, Audit: k.log})
	if err != nil {
		f.Fatal(err)
	}
	env, err := g.Attach(context.Background(), "sb", "agent", []string{"gh"})
	if err != nil {
		f.Fatal(err)
	}
	ph := envValue(env, "GH")
	for _, seed := range []struct {
		name, value string
		other       bool
	}{
		{"Authorization", "@", false},
		{"Authorization", "Bearer @", false},
		{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("u:@")), false},
		{"Authorization", "basic !!!notbase64@", false},
		{"X-A", "@@", true},
		{"@", "v", false},
		{"Cookie", "a=1; t=@", false},
		{"X-A", "ironclaw-secret-gh-", false},
	} {
		f.Add(seed.name, seed.value, seed.other)
	}
	f.Fuzz(func(t *testing.T, name, value string, other bool) {
		name = strings.ReplaceAll(name, "@", ph)
		value = strings.ReplaceAll(value, "@", ph)
		if !headerRE().MatchString(name) {
			return // not a header name a request could carry
		}
		host := "api.test"
		if other {
			host = "other.test"
		}
		h := http.Header{}
		h[http.CanonicalHeaderKey(name)] = []string{value}
		before := h.Clone()
		names, err := g.Swap(context.Background(), "sb", host, 443, h)
		unchanged := func() bool {
			for k, v := range before {
				if len(h[k]) != 1 || h[k][0] != v[0] {
					return false
				}
			}
			return len(h) == len(before)
		}
		switch {
		case err != nil:
			if !errors.Is(err, ErrMisuse) && !errors.Is(err, ErrDenied) {
				t.Fatalf("Swap error of no class: %v", err)
			}
			if strings.Contains(err.Error(), testValue) || !unchanged() {
				t.Fatalf("a refused Swap leaked or changed the request: %v", err)
			}
		case len(names) == 0:
			if !unchanged() {
				t.Fatalf("Swap without a swap changed the request: %v -> %v", before, h)
			}
		default:
			if other {
				t.Fatalf("swapped for another host: %v", h)
			}
			for _, vs := range h {
				for _, v := range vs {
					plain := v
					if dec, ok := basic("Authorization", v); ok {
						plain = dec
					}
					if strings.Contains(v, ph) || strings.Contains(plain, ph) {
						t.Fatalf("a placeholder is left after the swap: %q", v)
					}
				}
			}
		}
		if other {
			for _, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, testValue) {
						t.Fatal("the value went to another host")
					}
				}
			}
		}
	})
}
