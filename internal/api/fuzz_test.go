package api

import (
	"bytes"
	"net/http"
	"path"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Seeds beyond testdata/fuzz/<Name>/ (which holds the same kind of input).
var createSeeds = []string{
	``, `{}`, `null`, `{"image":"/srv/root","env":{"K":"V"},"ttl":"1h","idle":"10m","labels":{"team":"a"}}`,
	`{"limits":{"memory":"256M","pids":128,"cpus":0.5,"timeout":"30s","output":"1M","workspace":"512M","tmp":"256M","open_files":1024}}`,
	`{"limits":{"memory":1e30}}`, `{"limits":{"memory":"NaN"}}`, `{"ttl":"-1ns"}`, `{"egress":{"allow":[]}}`,
	`{"labels":{"":""}}`, `{"x":1}`, `{"ttl":"1h"}{}`,
	`{"exec":{"cmd":"echo hi"}}`, `{"exec":{}}`, `{"exec":{"argv":["x"],"approval":"apr-1"}}`, `{"exec":null}`,
}

var execSeeds = []string{
	``, `{}`, `{"cmd":"echo hi"}`, `{"argv":["echo","hi"],"stdin":"x","cwd":"/workspace","env":{"K":"V"},"timeout":"10s"}`,
	`{"cmd":"x","argv":["x"]}`, `{"argv":[""]}`, `{"argv":["a\u0000"]}`, `{"cwd":"/a/../b","cmd":"x"}`, `{"env":{"=":""},"cmd":"x"}`,
	`{"cmd":"x","timeout":"9999999999h"}`,
}

// FuzzDecodeCreate: decoding never panics; it fails with a 400 or
// produces a request the session manager and runtime accept as valid.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range createSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, first, err := decodeCreate(bytes.NewReader(data))
		if err != nil {
			if ae := classify(err); ae.status != http.StatusBadRequest {
				t.Fatalf("error %v renders as %d, want 400", err, ae.status)
			}
			return
		}
		if first != nil && (len(first.req.Argv) == 0 || first.approval != "") {
			t.Fatalf("accepted a first exec without a command or with an approval: %+v", first)
		}
		if err := req.Spec.WithDefaults().Validate(); err != nil {
			t.Fatalf("accepted an invalid spec: %v", err)
		}
		if req.TTL < 0 || req.Idle < 0 {
			t.Fatalf("negative ttl/idle: %v %v", req.TTL, req.Idle)
		}
		for k, v := range req.Labels {
			if k == "" || len(k) > 63 || len(v) > 255 {
				t.Fatalf("bad label %q=%q accepted", k, v)
			}
		}
		if req.Spec.Root.Kind == sandbox.RootDirectory && (!path.IsAbs(req.Spec.Root.Path) || path.Clean(req.Spec.Root.Path) != req.Spec.Root.Path) {
			t.Fatalf("bad image %q accepted", req.Spec.Root.Path)
		}
		if len(req.Spec.Mounts) > 0 || req.Spec.Workspace != "" || len(req.Spec.Network.ExposedTCP)+len(req.Spec.Network.LoopbackTCP) > 0 {
			t.Fatalf("the API set host-only fields: %+v", req.Spec)
		}
	})
}

// FuzzDecodeExec: decoding never panics; it fails with a 400 or produces
// a request with a non-empty command, valid env and a clean cwd.
func FuzzDecodeExec(f *testing.F) {
	for _, s := range execSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		call, err := decodeExec(bytes.NewReader(data))
		req := call.req
		if err != nil {
			if ae := classify(err); ae.status != http.StatusBadRequest {
				t.Fatalf("error %v renders as %d, want 400", err, ae.status)
			}
			return
		}
		if len(req.Argv) == 0 || req.Argv[0] == "" {
			t.Fatalf("empty command accepted: %q", req.Argv)
		}
		for _, a := range req.Argv {
			if strings.IndexByte(a, 0) >= 0 {
				t.Fatalf("NUL accepted: %q", req.Argv)
			}
		}
		for _, kv := range req.Env {
			if err := sandbox.ValidateEnv(kv); err != nil {
				t.Fatalf("bad env accepted: %v", err)
			}
		}
		if req.Cwd != "" && (!path.IsAbs(req.Cwd) || path.Clean(req.Cwd) != req.Cwd) {
			t.Fatalf("bad cwd accepted: %q", req.Cwd)
		}
		if req.Timeout < 0 {
			t.Fatalf("negative timeout accepted: %v", req.Timeout)
		}
		if req.Stdout != nil || req.Stderr != nil {
			t.Fatal("decoding set output writers")
		}
	})
}

// FuzzCheckPath: a path the API lets through is clean, absolute and
// under /workspace or /tmp.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/workspace/a", "/tmp", "/workspace/../etc", "/workspace//a", "/workspace/.", "a", "/tmpx", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath(p) != nil {
			return
		}
		if !path.IsAbs(p) || path.Clean(p) != p {
			t.Fatalf("unclean path %q accepted", p)
		}
		if p != "/workspace" && p != "/tmp" && !strings.HasPrefix(p, "/workspace/") && !strings.HasPrefix(p, "/tmp/") {
			t.Fatalf("path %q outside the writable trees accepted", p)
		}
	})
}

func TestIncompleteTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 3}, {"é", 2}, {"a\xc3", 1}, {"a\xe2\x82", 1}, {"a\xe2\x82\xac", 4}, {"\xf0\x9f\x98", 0},
		{"a\xff", 2}, {"a\x80", 2}, {"\xf0\x9f\x98\x80", 4},
	} {
		if got := incompleteTail([]byte(c.in)); got != c.want {
			t.Errorf("incompleteTail(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}
