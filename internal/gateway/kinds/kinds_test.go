package kinds

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// fieldsText is a payload's fields as "name: value" lines.
func fieldsText(fs []Field) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Name + ": " + f.Value + "\n")
	}
	return b.String()
}

func mustDecode(t *testing.T, kind, data string) Payload {
	t.Helper()
	p, err := Decode(kind, []byte(data))
	if err != nil {
		t.Fatalf("Decode(%s, %s) = %v", kind, data, err)
	}
	return p
}

// Every kind decodes its valid data, refuses the invalid, and shows the
// decisive fields the operator must read.
func TestKindsDecodeAndFields(t *testing.T) {
	tgt := Target{ID: "apr-1", Session: "sbx-1", RequestedBy: "agent"}
	for _, c := range []struct {
		kind, data string
		want       []string // in the fields
		summary    string   // in the summary
	}{
		{KindEgressHost, `{"host":"Evil.Example.","port":443}`, []string{"host:port: evil.example:443", "scope: sandbox sbx-1 only"}, "evil.example:443"},
		{KindEgressHost, `{"host":"2001:db8::1","port":8443}`, []string{"host:port: [2001:db8::1]:8443"}, "[2001:db8::1]:8443"},
		{KindSandboxWiden, `{"egress_allow":["API.example.com:443","*.pypi.org"],"limits":{"memory":"1G","pids":512,"cpus":2,"timeout":"5m","output":"8M","ttl":"2h","idle":"30m"}}`,
			[]string{"egress allow: api.example.com:443", "egress allow: *.pypi.org", "memory: 1GiB (1073741824 bytes)", "pids: 512", "cpus: 2",
				"timeout: 5m0s", "output: 8MiB", "ttl: 2h0m0s", "idle: 30m0s"}, "ttl 2h0m0s"},
		{KindSandboxWiden, `{"limits":{"ttl":"1h"}}`, []string{"ttl: 1h0m0s"}, "ttl 1h0m0s"},
		{KindToolRegister, `{"name":"lint","description":"run the linter","input_schema":{"type":"object"},"command":"eslint ."}`,
			[]string{"name: lint", "description: run the linter", "command: eslint .", `input schema: {"type":"object"}`}, "lint"},
		{KindAgentSpawn, `{"argv":["node","agent.js"],"image":"/images/node","env":{"TOKEN":"s3cret","MODE":"x"},"limits":{"memory":"1G"},"labels":{"team":"a"},"egress":{"allow":["api.example.com"]}}`,
			[]string{"image: /images/node", `argv: ["node","agent.js"]`, "memory: 1GiB", "pids: 256", "env: MODE, TOKEN (2 values set, not shown)",
				"egress allow: api.example.com", "label: team=a"}, `node agent.js`},
		{KindAgentSpawn, `{"cmd":"echo hi"}`, []string{`argv: ["/bin/sh","-c","echo hi"]`, "image: (the host-toolchain view)", "env: (none)"}, "echo hi"},
		{KindExecCommand, `{"argv":["curl","https://x.example"],"mode":"exec","command":"curl https://x.example","pattern":"^curl "}`,
			[]string{`argv: ["curl","https://x.example"]`, "mode: exec", "command: curl https://x.example", "policy pattern: ^curl "}, "curl"},
		{KindExecCommand, `{"command":"curl x"}`, []string{"command: curl x"}, "curl x"},
		{KindToolCall, `{"tool":"deploy","input":{"env":"prod"}}`, []string{"tool: deploy", `arguments: {"env":"prod"}`}, "deploy"},
		{KindSecretUse, `{"secret":"github","hosts":["API.github.com","*.example.com:443"]}`,
			[]string{"secret: github", "host: api.github.com", "host: *.example.com:443", "sandbox: sbx-1", "placeholder"}, "use the secret github at api.github.com, *.example.com:443"},
	} {
		p := mustDecode(t, c.kind, c.data)
		got := fieldsText(p.Fields(tgt))
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %s: fields lack %q:\n%s", c.kind, c.data, w, got)
			}
		}
		if s := p.Summary(tgt); !strings.Contains(s, c.summary) {
			t.Errorf("%s: summary %q lacks %q", c.kind, s, c.summary)
		}
		if strings.Contains(got, "s3cret") || strings.Contains(p.Summary(tgt), "s3cret") {
			t.Errorf("%s: an env value is displayed: %s", c.kind, got)
		}
		// The canonical encoding decodes to the same display.
		enc, err := Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		again := mustDecode(t, c.kind, string(enc))
		if fieldsText(again.Fields(tgt)) != got {
			t.Errorf("%s: canonical %s shows differently", c.kind, enc)
		}
	}
}

func TestKindsRefuse(t *testing.T) {
	for _, c := range []struct{ kind, data string }{
		{"root.shell", `{}`},
		{KindEgressHost, `{"host":"x.example","port":0}`},
		{KindEgressHost, `{"host":"*.example.com","port":443}`},
		{KindEgressHost, `{"host":"http://x.example/","port":443}`},
		{KindEgressHost, `{"host":"x.example","port":443,"scope":"global"}`},
		{KindEgressHost, `[{"host":"x.example","port":443}]`},
		{KindEgressHost, `{"host":"x.example","port":443} {"host":"y.example","port":443}`},
		{KindSandboxWiden, `{}`},
		{KindSandboxWiden, `{"limits":{"memory":"100T"}}`},
		{KindSandboxWiden, `{"limits":{"workspace":"1G"}}`},
		{KindSandboxWiden, `{"limits":{"ttl":"-1h"}}`},
		{KindSandboxWiden, `{"egress_allow":["a b"]}`},
		{KindToolRegister, `{"name":"1bad"}`},
		{KindAgentSpawn, `{}`},
		{KindAgentSpawn, `{"cmd":"x","argv":["y"]}`},
		{KindAgentSpawn, `{"cmd":"x","labels":{"ironclaw.agent":"apr-0"}}`},
		{KindAgentSpawn, `{"cmd":"x","labels":{"k":"\u001b[2Kgood"}}`},
		{KindAgentSpawn, `{"cmd":"x","env":{"A=B":"c"}}`},
		{KindAgentSpawn, `{"cmd":"x","limits":{"pids":-1}}`},
		{KindExecCommand, `{}`},
		{KindExecCommand, `{"argv":[""]}`},
		{KindExecCommand, `{"command":"x","mode":"Exec Now"}`},
		{KindToolCall, `{"tool":""}`},
		{KindToolCall, `{"tool":"deploy\u202e"}`},
		{KindSecretUse, `{"secret":"github"}`},
		{KindSecretUse, `{"secret":"Git Hub","hosts":["a.com"]}`},
		{KindSecretUse, `{"secret":"github","hosts":["https://a.com/"]}`},
		{KindSecretUse, `{"secret":"github","hosts":["a.com"],"value":"x"}`},
	} {
		if _, err := Decode(c.kind, []byte(c.data)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%s, %s) = %v, want ErrInvalid", c.kind, c.data, err)
		}
	}
	if _, err := Decode(KindToolCall, []byte(`{"tool":"x","input":"`+strings.Repeat("a", MaxDataBytes)+`"}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("oversized data: %v", err)
	}
}

// A second key that differs only in case would be the one encoding/json
// applies, while another reader (or a person) takes the first: refused, at
// any depth.
func TestHostileApprovalDuplicateKeys(t *testing.T) {
	for _, c := range []struct{ kind, data string }{
		{KindEgressHost, `{"host":"docs.example","HOST":"evil.example","port":443}`},
		{KindEgressHost, `{"host":"docs.example","host":"evil.example","port":443}`},
		{KindToolCall, `{"tool":"deploy","input":{"env":"staging","Env":"prod"}}`},
		{KindAgentSpawn, `{"cmd":"x","env":{"A":"1","a":"2"}}`},
	} {
		if _, err := Decode(c.kind, []byte(c.data)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "twice") {
			t.Errorf("Decode(%s, %s) = %v, want a duplicate-key refusal", c.kind, c.data, err)
		}
	}
	// Different keys in different objects are fine.
	mustDecode(t, KindToolCall, `{"tool":"t","input":{"a":{"x":1},"b":{"x":2}}}`)
}

// Summaries are one escaped line; fields keep values exact for the printer
// to escape.
func TestHostileApprovalSummaryEscaped(t *testing.T) {
	p := mustDecode(t, KindExecCommand, `{"argv":["sh","-c","echo \u001b[2K\rapproved\u202e"]}`)
	s := p.Summary(Target{Session: "sbx-1"})
	if strings.ContainsAny(s, "\x1b\r\u202e") || !strings.Contains(s, `\x1b`) || !strings.Contains(s, `\u202e`) {
		t.Fatalf("summary %q", s)
	}
	// The argv field is JSON: exact, and decodes to what will run.
	var argv []string
	for _, f := range p.Fields(Target{}) {
		if f.Name == "argv" {
			if err := json.Unmarshal([]byte(f.Value), &argv); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(argv) != 3 || argv[2] != "echo \x1b[2K\rapproved\u202e" {
		t.Fatalf("argv field decodes to %q", argv)
	}
	long := mustDecode(t, KindSandboxWiden, `{"egress_allow":[`+strings.Repeat(`"a.example.com",`, 63)+`"z.example.com"]}`)
	if s := long.Summary(Target{}); len(s) > maxSummary+len("… (see the fields)") {
		t.Fatalf("summary of %d bytes", len(s))
	}
	if f := fieldsText(long.Fields(Target{})); !strings.Contains(f, "z.example.com") {
		t.Fatal("fields cut")
	}
}

func TestWidenLimitsSandbox(t *testing.T) {
	l, err := DecodeWidenLimits([]byte(`{"memory":"1G","timeout":"2m","ttl":"3h","idle":"10m"}`))
	if err != nil {
		t.Fatal(err)
	}
	if sl := l.Sandbox(); sl.MemoryBytes != 1<<30 || sl.Timeout != 2*time.Minute || time.Duration(l.TTL) != 3*time.Hour || time.Duration(l.Idle) != 10*time.Minute {
		t.Fatalf("limits %+v", l)
	}
	if _, err := DecodeWidenLimits([]byte(`{"workspace":"1G"}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("fixed limit: %v", err)
	}
}
