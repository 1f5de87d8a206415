package auth

import (
	"net/http"
	"regexp"
	"testing"
)

func keyring(t *testing.T) *Keyring {
	t.Helper()
	k, err := NewKeyring(http.NotFoundHandler(), []Agent{{"agent", "token-a"}, {"agent:bob", "token-b"}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Keys are of the form the official SDKs accept, one per agent token, and
// each finds its own principal only.
func TestKeys(t *testing.T) {
	k := keyring(t)
	a, b := k.Principals()[0], k.Principals()[1]
	for _, p := range []*Principal{a, b} {
		if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(p.Key()) {
			t.Fatalf("key %q", p.Key())
		}
		if k.ByKey(p.Key()) != p {
			t.Fatalf("%s's key does not find it", p.Name)
		}
	}
	if a.Key() == b.Key() || APIKey("token-a") != a.Key() {
		t.Fatal("keys are not one per token")
	}
	for _, bad := range []string{"", "e2b_", a.Key()[:len(a.Key())-1], a.Key() + "0", "token-a"} {
		if k.ByKey(bad) != nil {
			t.Fatalf("key %q was accepted", bad)
		}
	}
	if _, err := NewKeyring(http.NotFoundHandler(), []Agent{{"a", "same"}, {"b", "same"}}); err == nil {
		t.Fatal("two agents with one token were accepted")
	}
	if _, err := NewKeyring(http.NotFoundHandler(), []Agent{{"a", ""}}); err == nil {
		t.Fatal("an agent without a token was accepted")
	}
}

// An access token is one sandbox's and one principal's: it opens no other
// sandbox and names no other principal; the traffic token is another.
func TestAccessTokens(t *testing.T) {
	k := keyring(t)
	a, b := k.Principals()[0], k.Principals()[1]
	tok := a.AccessToken("sbx-1")
	if k.ByAccessToken("sbx-1", tok) != a || k.ByAccessToken("sbx-1", b.AccessToken("sbx-1")) != b {
		t.Fatal("access tokens do not find their principals")
	}
	if k.ByAccessToken("sbx-2", tok) != nil || k.ByAccessToken("sbx-1", "") != nil || k.ByAccessToken("sbx-1", a.TrafficToken("sbx-1")) != nil {
		t.Fatal("an access token opened what it is not for")
	}
	if k.ByTrafficToken("sbx-1", a.TrafficToken("sbx-1")) != a || k.ByTrafficToken("sbx-1", tok) != nil {
		t.Fatal("traffic tokens")
	}
	if AccessTokenFor("token-a", "sbx-1") != tok {
		t.Fatal("AccessTokenFor disagrees with the principal")
	}
}

// Signatures are E2B's (the JS SDK's sandbox/signature.ts algorithm; the
// vectors were computed independently with Python's hashlib).
func TestSignature(t *testing.T) {
	if got := Signature("/workspace/a.txt", "read", "user", "tok123", 1700000000); got != "v1_7ledvIFy7CWlrEYZqc0TNhAPv/KigGw3W1xJ9HnvmSE" {
		t.Fatalf("signature with expiry %q", got)
	}
	if got := Signature("/workspace/a.txt", "write", "user", "tok123", 0); got != "v1_A38JTcLqnAjWfYWtxB2kwVNEGY3juvG0N5K8Kjy34Pc" {
		t.Fatalf("signature %q", got)
	}
	k := keyring(t)
	a := k.Principals()[0]
	sig := Signature("/workspace/x", "write", "user", a.AccessToken("sbx-1"), 0)
	if k.BySignature("sbx-1", "/workspace/x", "write", "user", 0, sig) != a {
		t.Fatal("a good signature was refused")
	}
	for _, c := range []struct{ id, path, op string }{{"sbx-2", "/workspace/x", "write"}, {"sbx-1", "/workspace/y", "write"}, {"sbx-1", "/workspace/x", "read"}} {
		if k.BySignature(c.id, c.path, c.op, "user", 0, sig) != nil {
			t.Fatalf("signature accepted for %v", c)
		}
	}
	if k.BySignature("sbx-1", "/workspace/x", "write", "user", 0, sig[3:]) != nil {
		t.Fatal("a signature without its v1_ prefix was accepted")
	}
}
