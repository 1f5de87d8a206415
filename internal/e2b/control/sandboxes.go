package control

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/envd"
)

// newSandbox is E2B's NewSandbox body (the members this API reads).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *network          `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        []volumeMount     `json:"volumeMounts"`
}

type autoResume struct {
	Enabled bool `json:"enabled"`
}

type network struct {
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	Rules              json.RawMessage `json:"rules"`
}

type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// sandboxJSON is E2B's Sandbox: what create, connect and resume answer.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	// Approvals (IronClaw's addition; the SDKs ignore it) are the ids of
	// the sandbox.widen requests the create filed for what it asked beyond
	// the operator's policy (egress hosts, a longer timeout): the sandbox
	// runs without them until an operator approves. They are also in the
	// Ironclaw-Approvals header.
	Approvals     []string `json:"approvals,omitempty"`
	ApprovalError string   `json:"approvalError,omitempty"`
}

// listedSandbox is E2B's ListedSandbox; detail adds SandboxDetail's
// members.
type listedSandbox struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []volumeMount     `json:"volumeMounts"`
}

type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken string     `json:"envdAccessToken"`
	Domain          *string    `json:"domain"`
	Lifecycle       *lifecycle `json:"lifecycle"`
}

type lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// metric is E2B's SandboxMetric.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// defaultTimeout is E2B's default timeout, for a create that gives none.
const defaultTimeout = 15

func (s *server) create(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b newSandbox
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	if present(b.MCP) {
		return errorf(http.StatusBadRequest, "MCP servers (mcp) are not supported: IronClaw runs no MCP gateway in its sandboxes")
	}
	if present(b.IAM) {
		return errorf(http.StatusBadRequest, "workload identity (iam) is not supported")
	}
	if b.TemplateID == "" {
		return errorf(http.StatusBadRequest, "templateID is required")
	}
	image, ok := s.template(b.TemplateID)
	template, snapshot := b.TemplateID, ""
	if !ok && strings.HasPrefix(b.TemplateID, snapshotPrefix) && validID(b.TemplateID) {
		img, tpl, err := s.fromSnapshot(r, p, b.TemplateID)
		if err != nil {
			return err
		}
		image, template, snapshot, ok = img, tpl, b.TemplateID, true
	}
	if !ok {
		return errorf(http.StatusNotFound, "template %s not found: this daemon serves %s (an operator maps more with serve --e2b-template ALIAS=IMAGE)",
			quote(b.TemplateID), strings.Join(s.templateIDs(), ", "))
	}
	timeout, err := seconds(b.Timeout, defaultTimeout)
	if err != nil {
		return err
	}
	req := client.CreateRequest{Image: image, Env: b.EnvVars, Snapshot: snapshot}
	pause := b.AutoPause != nil && *b.AutoPause
	if pause {
		// On timeout, pause: the timeout is the sandbox's idle timeout,
		// whose action is pause (whatever the policy's); its TTL stays
		// the daemon's, which still ends it (see docs/e2b.md).
		req.Idle, req.IdleAction = timeout, "pause"
	} else {
		req.TTL = timeout
	}
	labels, ports, err := s.labels(b.Metadata)
	if err != nil {
		return err
	}
	labels[labelTemplate] = template
	if pause {
		labels[labelOnTimeout] = "pause"
	}
	req.Labels, req.Ports = labels, ports
	if req.EgressAllow, err = egress(b.Network); err != nil {
		return err
	}
	for _, v := range b.VolumeMounts {
		req.Volumes = append(req.Volumes, client.VolumeMount{Name: v.Name, Path: v.Path})
	}
	created, err := p.API.CreateSandboxFiled(r.Context(), req)
	if err != nil {
		return err
	}
	out := s.sandbox(p, created.Sandbox)
	for _, a := range created.Approvals {
		out.Approvals = append(out.Approvals, a.ID)
	}
	out.ApprovalError = created.ApprovalError
	if len(out.Approvals) > 0 {
		w.Header().Set("Ironclaw-Approvals", strings.Join(out.Approvals, ","))
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// present reports whether an optional JSON member was given and not null.
func present(raw json.RawMessage) bool {
	v := strings.TrimSpace(string(raw))
	return v != "" && v != "null" && v != "{}"
}

// seconds reads a timeout in seconds (nil: def) as a duration; 0 and
// negative values are refused (a native lifetime of 0 means "unchanged").
func seconds(v *int64, def int64) (time.Duration, error) {
	n := def
	if v != nil {
		n = *v
	}
	if n < 1 || n > maxTimeout {
		return 0, errorf(http.StatusBadRequest, "timeout %d: give a number of seconds from 1 to %d", n, int64(maxTimeout))
	}
	return time.Duration(n) * time.Second, nil
}

// labels turns E2B metadata into native labels (the native API checks
// them: at most 32, keys of letters, digits and . _ / -), refusing the
// prefix this package keeps, and takes out the ports key.
func (s *server) labels(meta map[string]string) (map[string]string, []uint16, error) {
	labels := map[string]string{}
	ports := append([]uint16(nil), s.cfg.Ports...)
	for k, v := range meta {
		if strings.HasPrefix(strings.ToLower(k), labelPrefix) {
			return nil, nil, errorf(http.StatusBadRequest, "metadata key %s: the %s prefix is IronClaw's own", quote(k), labelPrefix)
		}
		if k == portsKey {
			for _, f := range strings.Split(v, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
				if err != nil || n < 1024 {
					return nil, nil, errorf(http.StatusBadRequest, "metadata %s: %s is not a port from 1024 to 65535", portsKey, quote(f))
				}
				ports = append(ports, uint16(n))
			}
			continue
		}
		labels[k] = v
	}
	// Duplicates are refused by the native API: drop them here.
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	uniq := ports[:0]
	for i, p := range ports {
		if i == 0 || p != ports[i-1] {
			uniq = append(uniq, p)
		}
	}
	return labels, uniq, nil
}

// egress maps E2B's network config onto the native egress allowlist.
// IronClaw denies every destination its policy and the sandbox's allowlist
// do not name, so denyOut (and allow_internet_access: false) asks for
// nothing more; allowOut names hosts, which the native create allows if
// the policy covers them and files for approval otherwise.
func egress(n *network) ([]string, error) {
	if n == nil {
		return nil, nil
	}
	if present(n.EgressProxy) {
		return nil, errorf(http.StatusBadRequest, "network.egressProxy is not supported: egress goes through IronClaw's broker")
	}
	if present(n.Rules) {
		return nil, errorf(http.StatusBadRequest, "network.rules (request transforms) are not supported")
	}
	if n.MaskRequestHost != nil && *n.MaskRequestHost != "" {
		return nil, errorf(http.StatusBadRequest, "network.maskRequestHost is not supported")
	}
	for _, h := range n.AllowOut {
		if strings.Contains(h, "/") || isIP(h) {
			return nil, errorf(http.StatusBadRequest, "network.allowOut %s: IronClaw allows egress by host name (\"api.example.com\", \"*.example.com:443\"), not by address", quote(h))
		}
	}
	return n.AllowOut, nil
}

func isIP(h string) bool {
	h = strings.Trim(h, "[]")
	if strings.Count(h, ":") > 1 {
		return true // IPv6
	}
	host, _, _ := strings.Cut(h, ":")
	parts := strings.Split(host, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 8); err != nil {
			return false
		}
	}
	return true
}

// sandbox is E2B's Sandbox of a native sandbox.
func (s *server) sandbox(p *auth.Principal, sb wire.Sandbox) sandboxJSON {
	tpl := templateOf(sb)
	traffic := p.TrafficToken(sb.ID)
	out := sandboxJSON{TemplateID: tpl, SandboxID: sb.ID, ClientID: clientID, EnvdVersion: envd.Version,
		EnvdAccessToken: p.AccessToken(sb.ID), TrafficAccessToken: &traffic, Domain: s.domain()}
	if _, mapped := s.cfg.Templates[tpl]; mapped {
		out.Alias = tpl
	}
	return out
}

func (s *server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

// templateOf is the template a sandbox was created from ("base" for one
// created through the native API).
func templateOf(sb wire.Sandbox) string {
	if t := sb.Labels[labelTemplate]; t != "" {
		return t
	}
	return "base"
}

func pausesOnTimeout(sb wire.Sandbox) bool { return sb.Labels[labelOnTimeout] == "pause" }

// listed is E2B's ListedSandbox of a native sandbox.
func (s *server) listed(sb wire.Sandbox) listedSandbox {
	meta := map[string]string{}
	for k, v := range sb.Labels {
		if !strings.HasPrefix(k, labelPrefix) {
			meta[k] = v
		}
	}
	out := listedSandbox{TemplateID: templateOf(sb), SandboxID: sb.ID, ClientID: clientID, StartedAt: sb.CreatedAt,
		EndAt: endAt(sb), Metadata: meta, State: sb.State, EnvdVersion: envd.Version, VolumeMounts: []volumeMount{}}
	if _, mapped := s.cfg.Templates[out.TemplateID]; mapped {
		out.Alias = out.TemplateID
	}
	out.CPUCount, out.MemoryMB, out.DiskSizeMB = 1, 0, 0
	if l := sb.Limits; l != nil {
		if c := int(l.CPUs + 0.999); c > 1 {
			out.CPUCount = c
		}
		out.MemoryMB = int64(l.Memory) >> 20
		out.DiskSizeMB = int64(l.Workspace) >> 20
	}
	return out
}

// noDeadline is the endAt of a sandbox with neither TTL nor idle timeout.
var noDeadline = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// endAt is when the sandbox times out: its TTL, or, sooner, the end of
// its idle timeout if it is not used again (a paused sandbox's idle
// timeout has done its work: only its TTL ends it).
func endAt(sb wire.Sandbox) time.Time {
	end := noDeadline
	if !sb.ExpiresAt.IsZero() {
		end = sb.ExpiresAt
	}
	if idle, err := time.ParseDuration(sb.IdleTimeout); err == nil && idle > 0 && sb.State == "running" {
		if t := sb.LastUsedAt.Add(idle); t.Before(end) {
			end = t
		}
	}
	return end.UTC()
}

// listV2 is GET /v2/sandboxes: ?metadata= (an url-encoded k=v&k2=v2),
// ?state=running,paused, ?limit= (clamped to 100), ?nextToken=; the next
// page's token is in X-Next-Token. Sandboxes come oldest first (the
// native order; ?order= is not honoured).
func (s *server) listV2(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	q := r.URL.Query()
	sel, err := metadataQuery(q.Get("metadata"))
	if err != nil {
		return err
	}
	states := map[string]bool{"running": true, "paused": true}
	if vs := q["state"]; len(vs) > 0 {
		// The SDKs send state=running,paused; repeated is accepted too.
		states = map[string]bool{}
		for _, st := range strings.Split(strings.Join(vs, ","), ",") {
			if st != "running" && st != "paused" {
				return errorf(http.StatusBadRequest, "state %s: running or paused", quote(st))
			}
			states[st] = true
		}
	}
	limit := defaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errorf(http.StatusBadRequest, "limit %s: a number from 1 to %d", quote(v), maxLimit)
		}
		limit = min(n, maxLimit)
	}
	after := q.Get("nextToken")
	if after != "" && !validID(after) {
		return errorf(http.StatusBadRequest, "nextToken is not a token this API gave")
	}
	page, err := p.API.ListSandboxesPage(r.Context(), sel, after, limit)
	if err != nil {
		return err
	}
	out := []listedSandbox{}
	for _, sb := range page.Sandboxes {
		if states[sb.State] {
			out = append(out, s.listed(sb))
		}
	}
	if page.Next != "" {
		w.Header().Set("X-Next-Token", page.Next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listV1 is the older GET /sandboxes: the running sandboxes (at most
// maxV1List), filtered by ?metadata=.
func (s *server) listV1(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sel, err := metadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		return err
	}
	page, err := p.API.ListSandboxesPage(r.Context(), sel, "", maxV1List)
	if err != nil {
		return err
	}
	out := []listedSandbox{}
	for _, sb := range page.Sandboxes {
		if sb.State == "running" {
			out = append(out, s.listed(sb))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metadataQuery parses E2B's metadata filter: a query string of
// url-encoded keys and values ("user=abc&app=prod").
func metadataQuery(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	if len(v) > 8<<10 {
		return nil, errorf(http.StatusBadRequest, "the metadata filter is longer than 8 KiB")
	}
	pairs, err := url.ParseQuery(v)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "metadata filter %s: %v", quote(v), err)
	}
	sel := map[string]string{}
	for k, vs := range pairs {
		key, val := unescape(k), unescape(vs[len(vs)-1])
		if strings.HasPrefix(strings.ToLower(key), labelPrefix) {
			return nil, errorf(http.StatusBadRequest, "metadata key %s: the %s prefix is IronClaw's own", quote(key), labelPrefix)
		}
		sel[key] = val
	}
	return sel, nil
}

// unescape undoes the SDKs' encodeURIComponent of each key and value.
func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// active is the caller's sandbox id while it runs or is paused; an
// ended (or another principal's) sandbox is 404, as in E2B.
func (s *server) active(r *http.Request, p *auth.Principal) (wire.Sandbox, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return wire.Sandbox{}, errorf(http.StatusNotFound, "sandbox %s not found", quote(id))
	}
	sb, err := p.API.GetSandbox(r.Context(), id)
	if err != nil {
		return sb, notFound(err, id)
	}
	if sb.State != "running" && sb.State != "paused" {
		return sb, errorf(http.StatusNotFound, "sandbox %s not found (it is %s)", id, sb.State)
	}
	return sb, nil
}

func isNotFound(err error) bool { return client.IsCode(err, wire.CodeNotFound) }

// notFound words a native 404 as E2B does.
func notFound(err error, id string) error {
	if isNotFound(err) {
		return errorf(http.StatusNotFound, "sandbox %s not found", id)
	}
	return err
}

func (s *server) get(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	on := "kill"
	if pausesOnTimeout(sb) {
		on = "pause"
	}
	writeJSON(w, http.StatusOK, sandboxDetail{listedSandbox: s.listed(sb), EnvdAccessToken: p.AccessToken(sb.ID),
		Domain: s.domain(), Lifecycle: &lifecycle{AutoResume: on == "pause", OnTimeout: on}})
	return nil
}

func (s *server) kill(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	if _, err := p.API.DeleteSandbox(r.Context(), sb.ID); err != nil {
		return notFound(err, sb.ID)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// lifetime sets the sandbox's timeout from now: its TTL, or its idle
// timeout when it pauses on timeout. With extendOnly, a timeout that ends
// before the present one leaves it (E2B's connect only extends).
func lifetime(r *http.Request, p *auth.Principal, sb wire.Sandbox, timeout time.Duration, extendOnly bool) error {
	var err error
	if pausesOnTimeout(sb) {
		if idle, perr := time.ParseDuration(sb.IdleTimeout); extendOnly && perr == nil && idle >= timeout {
			return nil
		}
		_, err = p.API.SetLifetime(r.Context(), sb.ID, 0, timeout)
	} else {
		if extendOnly && !sb.ExpiresAt.IsZero() && !sb.ExpiresAt.Before(time.Now().Add(timeout)) {
			return nil
		}
		if extendOnly && sb.ExpiresAt.IsZero() {
			return nil // no TTL: nothing to extend
		}
		_, err = p.API.SetLifetime(r.Context(), sb.ID, timeout, 0)
	}
	return notFound(err, sb.ID)
}

func (s *server) setTimeout(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b timeoutBody
	if err := decode(w, r, &b, true); err != nil {
		return err
	}
	if b.Timeout == nil {
		return errorf(http.StatusBadRequest, "timeout (seconds) is required")
	}
	timeout, err := seconds(b.Timeout, 0)
	if err != nil {
		return err
	}
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	if err := lifetime(r, p, sb, timeout, false); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect answers the sandbox, resuming it if paused (201; 200 when it
// was running), and extends its timeout to at least timeout from now.
func (s *server) connect(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b timeoutBody
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	timeout, err := seconds(b.Timeout, 300)
	if err != nil {
		return err
	}
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if sb.State == "paused" {
		if sb, err = p.API.ResumeSandbox(r.Context(), sb.ID); err != nil {
			return notFound(err, sb.ID)
		}
		status = http.StatusCreated
	}
	if err := lifetime(r, p, sb, timeout, true); err != nil {
		return err
	}
	writeJSON(w, status, s.sandbox(p, sb))
	return nil
}

// pause freezes the sandbox (memory kept whatever {memory} asks); 409 if
// it is paused already, as E2B.
func (s *server) pause(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b struct {
		Memory *bool `json:"memory"`
	}
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	if sb.State == "paused" {
		return errorf(http.StatusConflict, "sandbox %s is already paused", sb.ID)
	}
	if _, err := p.API.PauseSandbox(r.Context(), sb.ID); err != nil {
		return notFound(err, sb.ID)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resume is the older SDKs' resume: 201 and the sandbox; 409 if it is
// running.
func (s *server) resume(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var b timeoutBody
	if err := decode(w, r, &b, false); err != nil {
		return err
	}
	timeout, err := seconds(b.Timeout, defaultTimeout)
	if err != nil {
		return err
	}
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	if sb.State != "paused" {
		return errorf(http.StatusConflict, "sandbox %s is already running", sb.ID)
	}
	if sb, err = p.API.ResumeSandbox(r.Context(), sb.ID); err != nil {
		return notFound(err, sb.ID)
	}
	if err := lifetime(r, p, sb, timeout, false); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.sandbox(p, sb))
	return nil
}

// metricOf reads one metric of a sandbox from the native stats. CPU use
// is the average since the sandbox started; disk use is not measured (0).
func metricOf(r *http.Request, p *auth.Principal, id string) (metric, error) {
	st, err := p.API.SandboxStats(r.Context(), id)
	if err != nil {
		return metric{}, notFound(err, id)
	}
	cpus := st.CPUs
	if cpus <= 0 {
		cpus = 1
	}
	m := metric{Timestamp: st.At, TimestampUnix: st.At.Unix(), CPUCount: max(1, int(cpus+0.999)),
		MemUsed: st.MemoryBytes, MemTotal: st.MemoryLimitBytes, DiskTotal: st.WorkspaceBytes}
	if up := time.Duration(st.Uptime).Seconds(); up > 0 {
		m.CPUUsedPct = min(100, 100*st.CPUSeconds/up/cpus)
	}
	return m, nil
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sb, err := s.active(r, p)
	if err != nil {
		return err
	}
	m, err := metricOf(r, p, sb.ID)
	if client.IsCode(err, wire.CodeConflict) {
		writeJSON(w, http.StatusOK, []metric{}) // ended since
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, []metric{m})
	return nil
}

// metricsMany is GET /sandboxes/metrics?sandbox_ids=a,b (at most 100):
// the metric of each of the caller's running or paused sandboxes among
// them; the others are left out.
func (s *server) metricsMany(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for _, id := range strings.Split(v, ",") {
			if id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return errorf(http.StatusBadRequest, "sandbox_ids is required")
	}
	if len(ids) > maxMetricsIDs {
		return errorf(http.StatusBadRequest, "at most %d sandbox_ids", maxMetricsIDs)
	}
	out := map[string]metric{}
	for _, id := range ids {
		if !validID(id) {
			continue
		}
		m, err := metricOf(r, p, id)
		if err != nil {
			if client.IsCode(err, wire.CodeConflict) || isStatus(err, http.StatusNotFound) {
				continue
			}
			return err
		}
		out[id] = m
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
	return nil
}

func isStatus(err error, status int) bool {
	he, ok := err.(*httpError)
	return ok && he.status == status
}

// validID admits the native API's sandbox ids.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return fmt.Sprintf("%q", s)
}
