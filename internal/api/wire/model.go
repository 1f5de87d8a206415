package wire

import "time"

// ModelToken is POST /v1/model/tokens: a model-proxy token for a program
// on the host, and the base URLs to use it with.
type ModelToken struct {
	// Session names the token (DELETE /v1/model/tokens/{session}).
	Session   string    `json:"session"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// OpenAIBaseURL includes /v1; AnthropicBaseURL does not.
	OpenAIBaseURL    string `json:"openai_base_url"`
	AnthropicBaseURL string `json:"anthropic_base_url"`
}
