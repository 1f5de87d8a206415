// Package egress is the sandbox egress broker: the only way out of an
// IronClaw sandbox, which has no network interface of its own.
//
// A Broker is an HTTP forward proxy. The daemon serves it on a listener
// inside the sandbox's loopback and advertises it as HTTP_PROXY/HTTPS_PROXY.
// It accepts two kinds of requests:
//
//   - CONNECT host:port (HTTPS and any other TCP protocol): after the checks
//     below the broker dials the target, hijacks the client connection,
//     replies "HTTP/1.1 200 Connection established" and splices bytes both
//     ways until both directions have ended. An EOF on one side is passed on
//     as a half-close (CloseWrite) where the connection supports it,
//     otherwise both connections are closed. Once one direction has ended,
//     the other gets Config.HalfCloseTimeout to finish.
//   - Absolute-form plain HTTP requests (GET http://host/path): after the
//     same checks the request is forwarded with hop-by-hop and Proxy-*
//     headers removed, and the response is streamed back.
//
// Anything else is refused with 400: origin-form requests ("GET /path", the
// broker is not a web server), https:// URLs in absolute form (use CONNECT),
// and malformed targets.
//
// # Admission
//
// For every request, in this order:
//
//  1. The target host is normalised (lower case, one trailing dot dropped)
//     and validated. Hosts whose last label is numeric ("127.1", "0x7f.1")
//     are rejected, because some resolvers read them as IPv4 addresses.
//  2. Literal IP targets are admitted only if a rule names that exact IP
//     (and port); the Unknown hook is not consulted for them.
//  3. Names are matched against the sandbox's Allowlist. A name that is not
//     on it (at that port) is passed to Config.Unknown, which may block, for
//     example while a human decides; its context is cancelled when the client
//     goes away. A nil hook, false or an error deny. An approval applies to
//     that one request only: the broker does not add the host to the list
//     (the approval gateway may call Allowlist.Add itself).
//  4. Only then is the name resolved, on the host side through
//     Config.Resolver. Unadmitted names are never resolved, so the sandbox
//     cannot leak data through DNS queries.
//  5. Every resolved address is checked: if any is loopback, private
//     (RFC 1918), CGNAT, link-local (including the 169.254.169.254 metadata
//     address), unique-local, multicast, broadcast, unspecified, reserved or
//     documentation space, or an IPv4-mapped/NAT64/6to4 form of one, the
//     request is refused, unless the address is inside one of
//     Config.AllowPrivate. This defeats DNS rebinding of allowlisted names.
//  6. The broker dials the checked IP addresses, never the name, so a
//     second resolution cannot substitute a different address.
//
// Denials are answered with 403 and a one-line text body such as
// "ironclaw egress: host example.com:443 is not on this sandbox's allowlist"
// or "ironclaw egress: host x.example resolves to a private address
// 10.0.0.5". A name that does not resolve gets 502, as does a failed dial.
//
// # Bounds
//
// Everything in the sandbox is hostile, so everything it can make the
// broker hold is bounded (the Config fields; the defaults are limits a real
// agent does not meet):
//
//   - Tunnels and plain-HTTP requests in flight, per sandbox (MaxActive,
//     429 too_many_connections) and, through a shared netlimit.Budget, for
//     all sandboxes (Total, 503 broker_busy). Requests waiting for a
//     decision count.
//   - Requests held waiting for Unknown: per host:port (MaxWaitingPerHost,
//     that is per approval, since waiters on one host join one request)
//     and per sandbox (MaxWaiting). Beyond them a request is refused at
//     once with 429 too_many_waiting, and waits for nothing.
//   - Tunnels: closed after IdleTimeout without a byte either way, and
//     HalfCloseTimeout after one direction ended.
//   - Plain-HTTP request bodies are streamed upstream, never buffered, and
//     must arrive within Body (netlimit.BodyLimits; only time spent waiting
//     for the client counts); a slower one ends with 408.
//   - Upstream response heads: 1 MiB. Idle upstream connections kept for
//     reuse: 16.
//
// The request head's deadline, the connection cap and the other
// connection-level bounds are the server's: the daemon serves the broker
// with netlimit.Serve.
//
// # Audit
//
// Every attempt is recorded in Config.Log (if set) as an audit.Entry with
// Actor "egress" and Kind audit.KindEgressDeny or audit.KindEgressAllow.
// Data holds host, port, method, bytes_up (client to upstream), bytes_down,
// reason, and where known addr (the dialed IP), status (plain HTTP), error
// and duration_ms. For CONNECT the byte counts are raw tunnel bytes; for
// plain HTTP they are request and response body bytes. reason is
// "allowlist" or "approved" for admitted requests and a short code for
// denials (bad_request, not_proxy_request, not_allowlisted, literal_ip,
// unknown_denied, unknown_error, canceled, resolve_failed,
// private_address, too_many_connections, broker_busy, too_many_waiting;
// inside intercepted connections sni_mismatch, host_mismatch,
// secret_denied, secret_error, upstream_untrusted, too_many_requests). The
// egress.allow record of an intercepted CONNECT has intercepted: true.
// An admitted request whose dial fails is recorded as egress.allow with an
// error, since policy allowed it, as is a tunnel closed for idleness. Allow
// records are written when the connection or response ends, one each: they
// are actions, and their number is bounded by the caps above.
//
// # Brokered credentials
//
// With Config.Secrets set (the daemon's secrets store), a sandbox holds
// only placeholders ("ironclaw-secret-NAME-<32 hex>") for the credentials
// granted to it, and the broker puts the real values in on the way out,
// for the hosts each secret names only:
//
//   - A CONNECT to a host:port for which Secrets.Intercept is true is
//     admitted as any other, then answered 200 and its TLS terminated by
//     the broker with a leaf certificate for the CONNECT host signed by
//     the daemon's CA (CA: ECDSA P-256, made once in the data dir, key
//     0600, which every sandbox trusts; see below). ALPN offers h2 and
//     http/1.1. The client's TLS server name must be the CONNECT host (or
//     absent): otherwise the handshake fails and egress.deny records
//     sni_mismatch. Every request's Host (HTTP/2 :authority) must name
//     the CONNECT host, and its port if it gives one: otherwise 421 and
//     host_mismatch. So a sandbox cannot have a secret swapped under one
//     name and sent to another.
//   - For each request: a placeholder in the URL (path or query) is
//     refused (403, secret.misuse); Secrets.Swap replaces the sandbox's
//     placeholders in every header value and inside Basic credentials. A
//     placeholder of a secret not for this host is refused (403,
//     secret.misuse); a denied grant 403 (egress.deny secret_denied); a
//     pending one holds the request until decided. Proxy-Authorization
//     is dropped, request trailers too (they would pass unchecked), and
//     a header still holding a placeholder after the swap is refused.
//     Then one secret.inject record (names of the secrets, host, port,
//     method, path; never a value, never the query) is durable before
//     the request is forwarded.
//   - The request goes to the upstream over TLS that verifies it (the
//     system's roots and serve --egress-trust-ca, Config.UpstreamRoots)
//     for the CONNECT host, dialled only at the addresses admission
//     checked. An upstream whose certificate does not verify gets
//     nothing: 502 and egress.deny upstream_untrusted. Bodies stream both
//     ways; HTTP/2 on either side is independent of the other; a
//     WebSocket (or any Upgrade) is carried over HTTP/1.1 upstream.
//   - The response of a request that got a secret is scrubbed: every
//     value the swap put in (the whole header value, the part that
//     changed, and its Basic-decoded forms) is turned back into the
//     placeholder in the response's headers, trailers and streamed body (the
//     request goes with Accept-Encoding removed so that the body is
//     identity, a gzip one is decoded, any other encoding is refused with
//     502; Content-Length is dropped). An echo of the request never
//     carries a value into the sandbox. Frames after an Upgrade are not
//     scrubbed.
//   - A placeholder never travels in cleartext: a plain-HTTP request
//     carrying one is refused (403, secret.misuse, where plain_http) even
//     to a host the secret names, and so is a CONNECT whose target or
//     headers carry one. To hosts without secrets CONNECT is passed
//     through unchanged: what the sandbox sends inside that TLS the broker
//     cannot see, but a placeholder there is worthless. A plain-HTTP
//     request body to any host is read with a look-out for placeholders
//     (across reads): one ends the request, 403, secret.misuse (where
//     body).
//   - secret.misuse records (host, port, method, path, where: url,
//     headers, body, plain_http) are aggregated as refusals are (below),
//     keyed by (host, port, where): a misuse loop writes at most
//     2*MaxDenyKeys+1 of them a window.
//
// The sandbox's trust: every sandbox gets (sandbox.Spec.Trust, set by the
// daemon) the read-only directory sandbox.TrustDir (/.ironclaw-ca) holding
// the host's system CA bundle followed by the daemon's CA
// (ca-certificates.crt) and the CA alone (ironclaw-egress-ca.crt), the
// host-toolchain view links /etc/ssl/certs/ca-certificates.crt to the
// bundle, and every exec gets SSL_CERT_FILE, CURL_CA_BUNDLE,
// GIT_SSL_CAINFO, REQUESTS_CA_BUNDLE (the bundle) and NODE_EXTRA_CA_CERTS
// (the CA alone; Node adds it to its own roots), plus NODE_USE_ENV_PROXY=1
// so that Node's fetch uses the broker.
//
// Denials are recorded before the response is written, but repeated ones
// are aggregated so that a refusal loop cannot grow the log: within a
// window (Config.DenyWindow, a minute) the first denial of each kind (same
// sandbox, host, port and reason) is recorded in full, and when the window
// ends (or the broker closes) one summary record per kind carries the
// number of further denials of that kind: Data {summary: true, host, port,
// reason, count, since, window_ms}. At most Config.MaxDenyKeys (32) kinds
// are recorded in full a window; denials of further kinds are counted in
// one summary {summary: true, overflow: true, reasons: {reason: count},
// count, since, window_ms}. A window opens with the first denial after the
// last one closed. So one sandbox writes at most 2*MaxDenyKeys+1 denial
// records a window.
package egress
