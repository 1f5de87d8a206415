package secrets

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/ironclaw/ironclaw/internal/audit"
)

// Grant states.
const (
	StatePending = "pending" // a secret.use approval waits for a decision
	StateGranted = "granted"
	StateDenied  = "denied" // denied, expired or withdrawn: the placeholder opens nothing
)

// Asker files secret.use approvals and waits for their decisions: the
// daemon's side, through the approval gateway.
type Asker interface {
	// Ask files (or joins) the approval for sandbox, owned by principal,
	// to use secret m; it returns the approval's id.
	Ask(ctx context.Context, sandbox, principal string, m Meta) (approval string, err error)
	// Wait blocks until the approval is decided or ctx ends; detail says
	// why it was not approved (denied by whom, expired, withdrawn).
	Wait(ctx context.Context, approval string) (approved bool, detail string, err error)
	// Withdraw ends the sandbox's pending requests: its create failed
	// after some were filed.
	Withdraw(ctx context.Context, sandbox string)
}

// GrantsOptions configure NewGrants.
type GrantsOptions struct {
	Store *Store
	// Audit receives secret.grant records (required).
	Audit Auditor
	// Asker, if set, files the approvals of secrets with grant "ask";
	// without one, a create asking for such a secret is refused.
	Asker Asker
}

// Grants ties secrets to sandboxes and is what the egress broker asks
// (egress.Secrets). It is safe for concurrent use.
type Grants struct {
	st  *Store
	log Auditor
	ask Asker

	mu  sync.Mutex
	sbs map[string][]*grant // by sandbox; at most MaxPerSandbox each
}

// grant is one (sandbox, secret).
type grant struct {
	sandbox     string
	name        string
	secretID    string // the record's id when granted: a secret removed and set again is another secret
	placeholder string

	mu       sync.Mutex
	state    string
	approval string
	detail   string
}

// NewGrants makes the grants over a store.
func NewGrants(opts GrantsOptions) (*Grants, error) {
	if opts.Store == nil || opts.Audit == nil {
		return nil, fmt.Errorf("secrets: grants need a store and an audit log")
	}
	return &Grants{st: opts.Store, log: opts.Audit, ask: opts.Asker, sbs: map[string][]*grant{}}, nil
}

// Check validates the secrets a create asks for, before anything is
// made: at most MaxPerSandbox, each once, each existing, no two sharing an
// env variable, and a gateway for those that ask.
func (g *Grants) Check(names []string) error {
	_, err := g.resolveNames(names)
	return err
}

func (g *Grants) resolveNames(names []string) ([]*record, error) {
	if len(names) > MaxPerSandbox {
		return nil, fmt.Errorf("%w: %d secrets asked for, at most %d per sandbox", ErrInvalid, len(names), MaxPerSandbox)
	}
	recs := make([]*record, 0, len(names))
	envs := map[string]string{}
	for i, n := range names {
		if err := CheckName(n); err != nil {
			return nil, err
		}
		if slices.Contains(names[:i], n) {
			return nil, fmt.Errorf("%w: %s asked for twice", ErrInvalid, n)
		}
		r, ok := g.st.current(n)
		if !ok {
			return nil, fmt.Errorf("%w: no secret is named %s", ErrInvalid, n)
		}
		if other, dup := envs[r.meta.Env]; dup {
			return nil, fmt.Errorf("%w: %s and %s both set %s; ask for one of them", ErrInvalid, other, n, r.meta.Env)
		}
		envs[r.meta.Env] = n
		if r.meta.Grant == GrantAsk && g.ask == nil {
			return nil, fmt.Errorf("%w: %s needs an approval and this daemon has no approval gateway", ErrUnavailable, n)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

func placeholder(name string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return PlaceholderPrefix + name + "-" + hex.EncodeToString(b[:])
}

// Attach gives sandbox (owned by principal) the secrets it asked for and
// returns the environment its every command gets: ENV=placeholder for
// each. Secrets with grant "all" are granted now; the others file a
// secret.use approval each and stay pending. Every grant is audited
// (secret.grant) before it counts. On error the sandbox holds no grant.
func (g *Grants) Attach(ctx context.Context, sandbox, principal string, names []string) (env []string, err error) {
	if len(names) == 0 {
		return nil, nil
	}
	recs, err := g.resolveNames(names)
	if err != nil {
		return nil, err
	}
	list := make([]*grant, len(recs))
	for i, r := range recs {
		list[i] = &grant{sandbox: sandbox, name: r.meta.Name, secretID: r.id, placeholder: placeholder(r.meta.Name), state: StatePending}
	}
	g.mu.Lock()
	if _, taken := g.sbs[sandbox]; taken {
		g.mu.Unlock()
		return nil, fmt.Errorf("%w: sandbox %s holds grants already", ErrInvalid, sandbox)
	}
	g.sbs[sandbox] = list
	g.mu.Unlock()
	filed := false
	defer func() {
		if err != nil {
			g.Detach(sandbox)
			if filed {
				g.ask.Withdraw(context.WithoutCancel(ctx), sandbox)
			}
		}
	}()
	for i, r := range recs {
		gr := list[i]
		data := map[string]any{"secret": r.meta.Name, "hosts": r.meta.Hosts, "grant": r.meta.Grant, "env": r.meta.Env}
		if r.meta.Grant == GrantAll {
			data["state"] = StateGranted
			if _, err := g.log.Append(ctx, audit.Entry{Session: sandbox, Actor: principal, Kind: KindGrant, Data: data}); err != nil {
				return nil, fmt.Errorf("secrets: %s not granted, as its audit record could not be written: %w", r.meta.Name, err)
			}
			gr.mu.Lock()
			gr.state = StateGranted
			gr.mu.Unlock()
		} else {
			id, err := g.ask.Ask(ctx, sandbox, principal, r.meta)
			if err != nil {
				return nil, fmt.Errorf("secrets: asking to use %s: %w", r.meta.Name, err)
			}
			filed = true
			gr.mu.Lock()
			gr.approval = id
			gr.mu.Unlock()
			data["state"], data["approval"] = StatePending, id
			if _, err := g.log.Append(ctx, audit.Entry{Session: sandbox, Actor: principal, Kind: KindGrant, Data: data}); err != nil {
				return nil, fmt.Errorf("secrets: audit: %w", err)
			}
		}
		env = append(env, r.meta.Env+"="+gr.placeholder)
	}
	return env, nil
}

// Detach drops a sandbox's grants (it ended, or its create failed): its
// placeholders open nothing from now on.
func (g *Grants) Detach(sandbox string) {
	g.mu.Lock()
	delete(g.sbs, sandbox)
	g.mu.Unlock()
}

// Approve carries out an approved secret.use request (the gateway's
// action): the grant becomes granted.
func (g *Grants) Approve(ctx context.Context, sandbox, name, approval string) error {
	gr := g.find(sandbox, name)
	if gr == nil {
		return fmt.Errorf("%w: sandbox %s holds no request for %s (it ended?)", ErrNotFound, sandbox, name)
	}
	g.settle(ctx, gr, true, approval, "")
	return nil
}

func (g *Grants) find(sandbox, name string) *grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gr := range g.sbs[sandbox] {
		if gr.name == name {
			return gr
		}
	}
	return nil
}

// settle moves a pending grant to granted or denied, once, audited.
func (g *Grants) settle(ctx context.Context, gr *grant, approved bool, approval, detail string) {
	gr.mu.Lock()
	if gr.state != StatePending {
		gr.mu.Unlock()
		return
	}
	gr.state, gr.detail = StateDenied, detail
	if approved {
		gr.state = StateGranted
	}
	state := gr.state
	if approval == "" {
		approval = gr.approval
	}
	gr.mu.Unlock()
	data := map[string]any{"secret": gr.name, "state": state, "approval": approval}
	if detail != "" {
		data["detail"] = detail
	}
	// The decision is the gateway's and already on record; this record
	// ties it to the grant.
	_, _ = g.log.Append(context.WithoutCancel(ctx), audit.Entry{Session: gr.sandbox, Actor: "gateway", Kind: KindGrant, Data: data})
}

// Grant describes one of a sandbox's grants.
type Grant struct {
	Secret   string `json:"secret"`
	State    string `json:"state"`
	Approval string `json:"approval,omitempty"`
}

// Of lists a sandbox's grants (never the placeholders).
func (g *Grants) Of(sandbox string) []Grant {
	g.mu.Lock()
	list := slices.Clone(g.sbs[sandbox])
	g.mu.Unlock()
	out := make([]Grant, 0, len(list))
	for _, gr := range list {
		gr.mu.Lock()
		out = append(out, Grant{Secret: gr.name, State: gr.state, Approval: gr.approval})
		gr.mu.Unlock()
	}
	return out
}

func (g *Grants) grants(sandbox string) []*grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sbs[sandbox])
}

// live is the secret a grant is for, if it still exists (a secret removed
// and set again is another secret).
func (g *Grants) live(gr *grant) (*record, bool) {
	r, ok := g.st.current(gr.name)
	if !ok || r.id != gr.secretID {
		return nil, false
	}
	return r, true
}

// Intercept reports whether the broker must terminate TLS for sandbox's
// connection to host:port: a secret granted or pending for it lists that
// host.
func (g *Grants) Intercept(sandbox, host string, port int) bool {
	for _, gr := range g.grants(sandbox) {
		gr.mu.Lock()
		denied := gr.state == StateDenied
		gr.mu.Unlock()
		if denied {
			continue
		}
		if r, ok := g.live(gr); ok && r.meta.admits(host, port) {
			return true
		}
	}
	return false
}

// Contains reports whether b holds one of sandbox's placeholders.
func (g *Grants) Contains(sandbox string, b []byte) bool {
	for _, gr := range g.grants(sandbox) {
		if strings.Contains(string(b), gr.placeholder) {
			return true
		}
	}
	return false
}

// Swap replaces sandbox's placeholders in h, for a request to host:port:
// in the secret's Header a value that is the placeholder alone becomes
// Format with the value in it; elsewhere, and inside Basic credentials
// (decoded, replaced, encoded again), the placeholder becomes the bare
// value. It returns the names of the secrets swapped, sorted.
//
// Nothing in h changes unless every placeholder in it may go to
// host:port and is granted: a placeholder whose secret does not list the
// host (or in a header's name) is an error wrapping ErrMisuse; one whose
// grant was denied, or whose secret was removed, ErrDenied. A pending
// grant waits for its decision, or until ctx ends. Errors name secrets,
// never values.
func (g *Grants) Swap(ctx context.Context, sandbox, host string, port int, h http.Header) ([]string, error) {
	list := g.grants(sandbox)
	if len(list) == 0 {
		return nil, nil
	}
	var used []*grant
	for k, vs := range h {
		lk := strings.ToLower(k)
		for _, gr := range list {
			if strings.Contains(lk, strings.ToLower(gr.placeholder)) {
				return nil, fmt.Errorf("%w: the placeholder of secret %s in the name of a header", ErrMisuse, gr.name)
			}
		}
		for _, v := range vs {
			plain := v
			if dec, ok := basic(k, v); ok {
				plain = dec
			}
			for _, gr := range list {
				if (strings.Contains(v, gr.placeholder) || strings.Contains(plain, gr.placeholder)) && !slices.Contains(used, gr) {
					used = append(used, gr)
				}
			}
		}
	}
	if len(used) == 0 {
		return nil, nil
	}
	recs := make([]*record, len(used))
	for i, gr := range used {
		r, ok := g.live(gr)
		if !ok {
			return nil, fmt.Errorf("%w: secret %s was removed", ErrDenied, gr.name)
		}
		if !r.meta.admits(host, port) {
			return nil, fmt.Errorf("%w: secret %s may go to %s, not to %s:%d", ErrMisuse, gr.name, strings.Join(r.meta.Hosts, ", "), host, port)
		}
		recs[i] = r
	}
	for _, gr := range used {
		if err := g.await(ctx, gr); err != nil {
			return nil, err
		}
	}
	// Rotation may have happened while a grant waited: use what is
	// current now, checked again.
	vals := make([][]byte, len(used))
	defer func() {
		for _, v := range vals {
			clear(v)
		}
	}()
	for i, gr := range used {
		r, ok := g.live(gr)
		if !ok {
			return nil, fmt.Errorf("%w: secret %s was removed", ErrDenied, gr.name)
		}
		if !r.meta.admits(host, port) {
			return nil, fmt.Errorf("%w: secret %s may go to %s, not to %s:%d", ErrMisuse, gr.name, strings.Join(r.meta.Hosts, ", "), host, port)
		}
		v, err := g.st.value(r)
		if err != nil {
			return nil, err
		}
		recs[i], vals[i] = r, v
	}
	for k, vs := range h {
		for j, v := range vs {
			vs[j] = swapValue(k, v, used, recs, vals)
		}
	}
	names := make([]string, len(used))
	for i, gr := range used {
		names[i] = gr.name
	}
	slices.Sort(names)
	return names, nil
}

// await returns once gr is granted, or an error wrapping ErrDenied.
func (g *Grants) await(ctx context.Context, gr *grant) error {
	gr.mu.Lock()
	state, id := gr.state, gr.approval
	gr.mu.Unlock()
	if state == StatePending {
		if id == "" || g.ask == nil {
			return fmt.Errorf("%w: secret %s was never asked for", ErrDenied, gr.name)
		}
		approved, detail, err := g.ask.Wait(ctx, id)
		if err != nil {
			return err
		}
		g.settle(ctx, gr, approved, id, detail)
		gr.mu.Lock()
		state = gr.state
		gr.mu.Unlock()
	}
	if state != StateGranted {
		gr.mu.Lock()
		detail := gr.detail
		gr.mu.Unlock()
		if detail != "" {
			detail = " (" + detail + ")"
		}
		return fmt.Errorf("%w: secret %s is not granted to this sandbox%s", ErrDenied, gr.name, detail)
	}
	return nil
}

// basic decodes Basic credentials in an Authorization header.
func basic(k, v string) (string, bool) {
	if k != "Authorization" || len(v) < 6 || !strings.EqualFold(v[:6], "basic ") {
		return "", false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:]))
	if err != nil {
		return "", false
	}
	return string(dec), true
}

func swapValue(k, v string, used []*grant, recs []*record, vals [][]byte) string {
	if dec, ok := basic(k, v); ok {
		out := dec
		for i, gr := range used {
			out = strings.ReplaceAll(out, gr.placeholder, string(vals[i]))
		}
		if out != dec {
			return v[:6] + base64.StdEncoding.EncodeToString([]byte(out))
		}
	}
	for i, gr := range used {
		if !strings.Contains(v, gr.placeholder) {
			continue
		}
		if k == http.CanonicalHeaderKey(recs[i].meta.Header) && strings.TrimSpace(v) == gr.placeholder {
			return strings.Replace(recs[i].meta.Format, ValueMark, string(vals[i]), 1)
		}
		v = strings.ReplaceAll(v, gr.placeholder, string(vals[i]))
	}
	return v
}
