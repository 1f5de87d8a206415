package wire

import "time"

// OpenPortRequest is POST /v1/sandboxes/{id}/ports: a URL for a server
// the sandbox serves on one of its create's ports.
type OpenPortRequest struct {
	Port int `json:"port"`
	// TTL is how long the URL works (at most the policy's ports.url_ttl,
	// its default too).
	TTL Duration `json:"ttl,omitempty"`
}

// PortURL is the answer: a signed URL on the daemon's ports listener that
// reverse-proxies HTTP and WebSocket to the sandbox's 127.0.0.1:port
// until ExpiresAt (or the sandbox's end). Whoever holds it needs no token.
type PortURL struct {
	Port      int       `json:"port"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}
