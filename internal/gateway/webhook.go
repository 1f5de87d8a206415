package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Webhook delivery headers. The signature is
// "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body)): binding the
// timestamp lets a receiver refuse replays of old deliveries.
const (
	HeaderEvent     = "X-IronClaw-Event"
	HeaderDelivery  = "X-IronClaw-Delivery"
	HeaderTimestamp = "X-IronClaw-Timestamp"
	HeaderSignature = "X-IronClaw-Signature"
)

// Audit record kinds of deliveries that were not made.
const (
	// KindWebhookDrop: a URL's queue was full, so its oldest delivery was
	// dropped to make room (or its URL is no longer configured).
	KindWebhookDrop = "webhook.drop"
	// KindWebhookFail: a delivery was given up (its attempts ran out, or
	// the receiver answered with a redirect or a 4xx).
	KindWebhookFail = "webhook.fail"
)

// Webhook defaults.
const (
	DefaultWebhookAttempts   = 12
	DefaultWebhookBackoff    = time.Second
	DefaultWebhookMaxBackoff = 10 * time.Minute
	DefaultWebhookMaxQueued  = 1000
	DefaultWebhookMaxBytes   = 32 << 20
	webhookTimeout           = 10 * time.Second
	maxWebhookResponse       = 64 << 10
)

// Sign returns the signature header value for a delivery.
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// WebhookOptions configure a Webhooks notifier.
type WebhookOptions struct {
	URLs   []string
	Secret []byte // required: receivers must be able to tell us from anyone
	// Store keeps the deliveries not yet made, so they survive a restart;
	// Audit records every delivery dropped or given up. Both required.
	Store *store.Store
	Audit Auditor
	// Client posts the deliveries (default: 10s timeout). Redirects are
	// never followed, whatever the client says: a redirect is a failed
	// delivery.
	Client *http.Client
	// Attempts per delivery (default 12); between them Backoff (default
	// 1s) doubles up to MaxBackoff (default 10m). Network errors, 429 and
	// 5xx are retried; other answers are not.
	Attempts            int
	Backoff, MaxBackoff time.Duration
	// MaxQueued and MaxQueuedBytes bound the deliveries waiting for one
	// URL (default 1000 and 32 MiB). At the bound the oldest delivery of
	// the principal with the most waiting is dropped, so one agent's flood
	// costs that agent's notifications first; each drop is audited
	// (KindWebhookDrop).
	MaxQueued      int
	MaxQueuedBytes int64
	Logf           func(format string, args ...any)
	Now            func() time.Time
}

// Webhooks posts approval events to operator-configured URLs. Every event
// is first written to the store, one row per URL; one worker per URL
// delivers its rows oldest first, retrying with backoff across restarts,
// and deletes each once delivered or given up. Its Notify fits
// Options.Notify.
type Webhooks struct {
	opts   WebhookOptions
	db     *store.Store
	wakes  map[string]chan struct{}
	stop   chan struct{}
	ctx    context.Context // cancels posts in flight at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// WebhookEvent is the JSON body of a delivery.
type WebhookEvent struct {
	Event    string    `json:"event"` // approval.request or approval.decide
	Delivery string    `json:"delivery"`
	Time     time.Time `json:"time"`
	Approval Approval  `json:"approval"`
}

// NewWebhooks checks opts, drops (audited) the stored deliveries of URLs
// no longer configured, and starts one worker per URL.
func NewWebhooks(opts WebhookOptions) (*Webhooks, error) {
	if len(opts.Secret) < 16 {
		return nil, fmt.Errorf("%w: a webhook secret of at least 16 bytes is required", ErrInvalid)
	}
	for _, u := range opts.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("%w: webhook URL %q must be an absolute http(s) URL", ErrInvalid, redactURL(u))
		}
	}
	if opts.Store == nil || opts.Audit == nil {
		return nil, errors.New("gateway: webhooks need a store and an audit log")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{
			Timeout: webhookTimeout,
			Transport: &http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
				TLSHandshakeTimeout:   5 * time.Second,
				ResponseHeaderTimeout: webhookTimeout,
				IdleConnTimeout:       30 * time.Second,
				MaxIdleConnsPerHost:   1,
			},
		}
	}
	c := *opts.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if c.Timeout <= 0 {
		c.Timeout = webhookTimeout
	}
	opts.Client = &c
	if opts.Attempts <= 0 {
		opts.Attempts = DefaultWebhookAttempts
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultWebhookBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultWebhookMaxBackoff
	}
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = DefaultWebhookMaxQueued
	}
	if opts.MaxQueuedBytes <= 0 {
		opts.MaxQueuedBytes = DefaultWebhookMaxBytes
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.URLs = slices.Compact(slices.Clone(opts.URLs))
	w := &Webhooks{opts: opts, db: opts.Store, wakes: map[string]chan struct{}{}, stop: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if err := w.dropUnconfigured(); err != nil {
		return nil, err
	}
	for _, u := range opts.URLs {
		wake := make(chan struct{}, 1)
		w.wakes[u] = wake
		w.wg.Add(1)
		go w.run(u, wake)
	}
	return w, nil
}

// Notify stores one delivery of the event per URL and wakes the workers.
// It does not wait on the network. A delivery that cannot be stored is
// logged (the audit log still has the event).
func (w *Webhooks) Notify(event string, a Approval) {
	for _, u := range w.opts.URLs {
		id := "whd-" + newID()[4:]
		now := w.opts.Now().UTC()
		body, err := json.Marshal(WebhookEvent{Event: event, Delivery: id, Time: now, Approval: a})
		if err != nil {
			w.opts.Logf("webhook: encode %s: %v", a.ID, err)
			return
		}
		if err := w.enqueue(u, id, event, a.ID, a.RequestedBy, body, now); err != nil {
			w.opts.Logf("webhook: store %s of %s for %s: %v", event, a.ID, redactURL(u), err)
			continue
		}
		select {
		case w.wakes[u] <- struct{}{}:
		default:
		}
	}
}

func (w *Webhooks) enqueue(u, id, event, approval, principal string, body []byte, now time.Time) error {
	ctx := context.Background()
	if _, err := w.db.DB().ExecContext(ctx, `INSERT INTO webhook_deliveries (id, url, event, approval, principal, body, created_at, attempts, next_at, last_error)
	VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, '')`, id, u, event, approval, principal, string(body), formatTime(now), formatTime(now)); err != nil {
		return err
	}
	// Make room: the oldest of whoever has the most waiting goes first,
	// each one audited.
	for {
		var n int
		var size int64
		if err := w.db.DB().QueryRowContext(ctx, `SELECT count(*), ifnull(sum(length(body)), 0) FROM webhook_deliveries WHERE url = ?`, u).Scan(&n, &size); err != nil {
			return err
		}
		if n <= w.opts.MaxQueued && size <= w.opts.MaxQueuedBytes || n <= 1 {
			return nil
		}
		d, ok, err := w.dropCandidate(ctx, u)
		if err != nil || !ok {
			return err
		}
		w.drop(ctx, d, fmt.Sprintf("the queue for this URL is full (%d deliveries, %d bytes; at most %d and %d)", n, size, w.opts.MaxQueued, w.opts.MaxQueuedBytes))
	}
}

// Close stops the workers; posts in flight get until ctx ends. Deliveries
// not made stay in the store for the next start.
func (w *Webhooks) Close(ctx context.Context) {
	w.once.Do(func() { close(w.stop) })
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		w.cancel()
		<-done
	}
	w.cancel()
}

// pendingDelivery is one stored row.
type pendingDelivery struct {
	seq                             int64
	id, url, event, appr, principal string
	body                            []byte
	attempts                        int
	nextAt                          time.Time
}

func (w *Webhooks) scanOne(ctx context.Context, where string, args ...any) (pendingDelivery, bool, error) {
	var d pendingDelivery
	var body, next string
	err := w.db.DB().QueryRowContext(ctx, `SELECT seq, id, url, event, approval, principal, body, attempts, next_at FROM webhook_deliveries `+where, args...).
		Scan(&d.seq, &d.id, &d.url, &d.event, &d.appr, &d.principal, &body, &d.attempts, &next)
	if errors.Is(err, sql.ErrNoRows) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("webhook: read deliveries: %w", err)
	}
	d.body = []byte(body)
	d.nextAt, _ = time.Parse(timeLayout, next)
	return d, true, nil
}

// next is the delivery of u due first.
func (w *Webhooks) next(ctx context.Context, u string) (pendingDelivery, bool, error) {
	return w.scanOne(ctx, `WHERE url = ? ORDER BY next_at, seq LIMIT 1`, u)
}

// dropCandidate is the oldest delivery of u's principal with the most
// deliveries waiting.
func (w *Webhooks) dropCandidate(ctx context.Context, u string) (pendingDelivery, bool, error) {
	return w.scanOne(ctx, `WHERE url = ? AND principal = (SELECT principal FROM webhook_deliveries WHERE url = ?
	GROUP BY principal ORDER BY count(*) DESC, min(seq) LIMIT 1) ORDER BY seq LIMIT 1`, u, u)
}

// drop audits a delivery that will not be made, then deletes it.
func (w *Webhooks) drop(ctx context.Context, d pendingDelivery, why string) {
	w.forget(ctx, d, KindWebhookDrop, why)
}

func (w *Webhooks) forget(ctx context.Context, d pendingDelivery, kind, why string) {
	data := map[string]any{"delivery": d.id, "url": redactURL(d.url), "event": d.event, "approval": d.appr,
		"requested_by": d.principal, "attempts": d.attempts, "reason": why}
	if _, err := w.opts.Audit.Append(ctx, audit.Entry{Actor: "gateway", Kind: kind, Data: data}); err != nil {
		w.opts.Logf("webhook: audit %s of %s: %v", kind, d.id, err)
	}
	w.opts.Logf("webhook: %s of %s to %s not delivered: %s", d.event, d.appr, redactURL(d.url), why)
	if _, err := w.db.DB().ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE seq = ?`, d.seq); err != nil {
		w.opts.Logf("webhook: delete %s: %v", d.id, err)
	}
}

func (w *Webhooks) dropUnconfigured() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wanted, _ := json.Marshal(w.opts.URLs)
	if len(w.opts.URLs) == 0 {
		wanted = []byte("[]")
	}
	for {
		d, ok, err := w.scanOne(ctx, `WHERE url NOT IN (SELECT value FROM json_each(?)) ORDER BY seq LIMIT 1`, string(wanted))
		if err != nil || !ok {
			return err
		}
		w.drop(ctx, d, "its URL is no longer configured")
	}
}

// run delivers u's rows, due first, until Close.
func (w *Webhooks) run(u string, wake chan struct{}) {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		d, ok, err := w.next(w.ctx, u)
		wait := time.Duration(-1) // until woken
		switch {
		case err != nil:
			if w.ctx.Err() == nil {
				w.opts.Logf("%v", err)
			}
			wait = w.opts.Backoff
		case ok:
			wait = max(0, d.nextAt.Sub(w.opts.Now()))
		}
		if wait == 0 {
			w.attempt(d)
			continue
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-w.stop:
		case <-wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// attempt posts one delivery and records the outcome.
func (w *Webhooks) attempt(d pendingDelivery) {
	status, err := w.post(d)
	if w.ctx.Err() != nil {
		return // shutting down: not an attempt, the row stays for the next start
	}
	ctx := context.Background()
	if err == nil && status/100 == 2 {
		if _, err := w.db.DB().ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE seq = ?`, d.seq); err != nil {
			w.opts.Logf("webhook: delete %s: %v", d.id, err)
		}
		return
	}
	d.attempts++
	problem := fmt.Sprintf("status %d", status)
	if err != nil {
		problem = err.Error()
	}
	retry := err != nil || status == http.StatusTooManyRequests || status >= 500
	switch {
	case status/100 == 3:
		w.forget(ctx, d, KindWebhookFail, fmt.Sprintf("the receiver answered %s; redirects are not followed", problem))
		return
	case !retry:
		w.forget(ctx, d, KindWebhookFail, "the receiver answered "+problem)
		return
	case d.attempts >= w.opts.Attempts:
		w.forget(ctx, d, KindWebhookFail, fmt.Sprintf("gave up after %d attempts; the last: %s", d.attempts, problem))
		return
	}
	wait := w.opts.Backoff << min(d.attempts-1, 30)
	if wait <= 0 || wait > w.opts.MaxBackoff {
		wait = w.opts.MaxBackoff
	}
	next := w.opts.Now().Add(wait)
	if _, err := w.db.DB().ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = ?, next_at = ?, last_error = ? WHERE seq = ?`,
		d.attempts, formatTime(next), truncateText(problem, 500), d.seq); err != nil {
		w.opts.Logf("webhook: record attempt of %s: %v", d.id, err)
	}
}

func (w *Webhooks) post(d pendingDelivery) (int, error) {
	ts := strconv.FormatInt(w.opts.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "IronClaw-Webhook/1")
	req.Header.Set(HeaderEvent, d.event)
	req.Header.Set(HeaderDelivery, d.id)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(w.opts.Secret, ts, d.body))
	resp, err := w.opts.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, which may hold a secret
		}
		return 0, err
	}
	// Read a bounded part of the answer, so the connection can be reused
	// and a receiver cannot make us read forever.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookResponse))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// redactURL keeps a URL's scheme and host: its path and query often hold
// the receiver's secret (chat webhooks do).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	out := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		out += "/…"
	}
	return out
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
