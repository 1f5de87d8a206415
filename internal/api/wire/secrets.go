package wire

import "time"

// SetSecretRequest is the body of PUT /v1/secrets/{name}: a new secret, or
// a new value and settings for an existing one (a rotation, in force for
// running sandboxes at once). Empty members take their defaults.
type SetSecretRequest struct {
	// Hosts are egress rules where the broker may put the value.
	Hosts []string `json:"hosts"`
	// Env is the variable granted sandboxes see (default: the name
	// upper-cased, - as _).
	Env string `json:"env,omitempty"`
	// Header (default Authorization) and Format (default "Bearer
	// {value}"): a Header value that is the placeholder alone becomes
	// Format with the value in it.
	Header string `json:"header,omitempty"`
	Format string `json:"format,omitempty"`
	// Grant is "ask" (default: a secret.use approval per sandbox) or
	// "all".
	Grant string `json:"grant,omitempty"`
	// Value is the secret itself (1-16384 bytes, no control characters);
	// it is never returned.
	Value string `json:"value"`
}

// Secret is a secret's metadata; its value is never returned.
type Secret struct {
	Name      string    `json:"name"`
	Hosts     []string  `json:"hosts"`
	Env       string    `json:"env"`
	Header    string    `json:"header"`
	Format    string    `json:"format"`
	Grant     string    `json:"grant"`
	Source    string    `json:"source"` // policy (read-only) or api
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
