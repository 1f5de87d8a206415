package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
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
	Client *http.Client
	// Attempts per delivery and URL (default 5), with Backoff doubling
	// between them (default 500ms).
	Attempts int
	Backoff  time.Duration
	Logf     func(format string, args ...any)
}

// Webhooks posts approval events to operator-configured URLs, in the
// background, with retries. Its Notify fits Options.Notify.
type Webhooks struct {
	opts  WebhookOptions
	queue chan delivery
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

type delivery struct {
	event string
	body  []byte
	id    string
}

// WebhookEvent is the JSON body of a delivery.
type WebhookEvent struct {
	Event    string    `json:"event"` // approval.request or approval.decide
	Delivery string    `json:"delivery"`
	Time     time.Time `json:"time"`
	Approval Approval  `json:"approval"`
}

// NewWebhooks starts the delivery worker.
func NewWebhooks(opts WebhookOptions) (*Webhooks, error) {
	if len(opts.Secret) < 16 {
		return nil, fmt.Errorf("%w: a webhook secret of at least 16 bytes is required", ErrInvalid)
	}
	for _, u := range opts.URLs {
		r, err := http.NewRequest(http.MethodPost, u, nil)
		if err != nil || (r.URL.Scheme != "http" && r.URL.Scheme != "https") || r.URL.Host == "" {
			return nil, fmt.Errorf("%w: webhook URL %q must be an absolute http(s) URL", ErrInvalid, u)
		}
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 5
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 500 * time.Millisecond
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	w := &Webhooks{opts: opts, queue: make(chan delivery, 1024), stop: make(chan struct{})}
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// Notify queues an event; it never blocks. When the queue is full the event
// is dropped and logged (the audit log still has it).
func (w *Webhooks) Notify(event string, a Approval) {
	if len(w.opts.URLs) == 0 {
		return
	}
	id := "whd-" + newID()[4:]
	body, err := json.Marshal(WebhookEvent{Event: event, Delivery: id, Time: time.Now().UTC(), Approval: a})
	if err != nil {
		w.opts.Logf("webhook: encode %s: %v", a.ID, err)
		return
	}
	select {
	case w.queue <- delivery{event: event, body: body, id: id}:
	default:
		w.opts.Logf("webhook: queue full, dropped %s for %s", event, a.ID)
	}
}

// Close stops after the deliveries in flight; queued ones get until ctx ends.
func (w *Webhooks) Close(ctx context.Context) {
	w.once.Do(func() { close(w.stop) })
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (w *Webhooks) run() {
	defer w.wg.Done()
	for {
		select {
		case d := <-w.queue:
			for _, u := range w.opts.URLs {
				w.deliver(u, d)
			}
		case <-w.stop:
			return
		}
	}
}

// deliver posts one event to one URL, retrying network errors, 429 and 5xx.
func (w *Webhooks) deliver(url string, d delivery) {
	wait := w.opts.Backoff
	for attempt := 1; ; attempt++ {
		status, err := w.post(url, d)
		if err == nil && status/100 == 2 {
			return
		}
		retry := err != nil || status == http.StatusTooManyRequests || status >= 500
		if !retry || attempt == w.opts.Attempts {
			w.opts.Logf("webhook: %s to %s failed after %d attempt(s): status %d, %v", d.id, url, attempt, status, err)
			return
		}
		select {
		case <-time.After(wait):
		case <-w.stop:
			return
		}
		wait *= 2
	}
}

func (w *Webhooks) post(url string, d delivery) (int, error) {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(d.body))
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
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}
