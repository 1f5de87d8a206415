package modelproxy

import "net/http"

// Headers cross the proxy by allowlist in both directions: a request
// header the client sets reaches the provider only if it is listed here,
// and a provider's response header reaches the client only if it is
// listed. Everything else (the client's Authorization, X-Api-Key, Cookie,
// Forwarded/X-Forwarded-*, hop-by-hop headers, OpenAI-Organization and
// -Project; the provider's Set-Cookie, organization and rate-limit
// headers, which describe the operator's account) is dropped.

// requestHeaders are forwarded upstream for every provider.
var requestHeaders = []string{"Content-Type", "Accept", "User-Agent"}

// providerRequestHeaders are forwarded for one provider only: its
// version and beta selectors.
var providerRequestHeaders = map[Provider][]string{
	OpenAI:    {"Openai-Beta"},
	Anthropic: {"Anthropic-Version", "Anthropic-Beta"},
}

// responseHeaders are relayed back to the client: what SDKs read to
// decode, retry and report.
var responseHeaders = []string{
	"Content-Type", "Cache-Control", "Retry-After", "Retry-After-Ms", "X-Should-Retry",
	"X-Request-Id", "Request-Id",
}

// upstreamHeaders builds the headers of the upstream request from the
// client's.
func upstreamHeaders(prov Provider, in http.Header) http.Header {
	out := make(http.Header, 8)
	copyListed := func(names []string) {
		for _, k := range names {
			// Shared, not copied: neither request's header is changed
			// in place after this (Set replaces a key's slice).
			if vs := in[k]; len(vs) > 0 {
				out[k] = vs
			}
		}
	}
	copyListed(requestHeaders)
	copyListed(providerRequestHeaders[prov])
	// Identity, so usage can be read from the relayed bytes.
	out.Set("Accept-Encoding", "identity")
	return out
}

// relayHeaders copies the listed response headers into dst.
func relayHeaders(dst, src http.Header) {
	for _, k := range responseHeaders {
		if vs := src[k]; len(vs) > 0 {
			dst[k] = vs // the upstream response's header is not changed after this
		}
	}
	dst.Set("X-Content-Type-Options", "nosniff")
}
