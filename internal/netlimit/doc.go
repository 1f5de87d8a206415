// Package netlimit bounds what the clients of an HTTP server can make the
// process hold: connections, descriptors, and the time a request's head,
// body or response may take. It is for servers whose clients are hostile,
// such as the ones the daemon runs on every sandbox's loopback (the model
// proxy and the egress broker).
//
// # Connections
//
// A Listener caps the connections it holds at once (Config.MaxConns, per
// listener, which for an in-sandbox server means per sandbox) and takes one
// unit of a Budget for each, shared by every listener of the process, so
// that all sandboxes together cannot use up the daemon's descriptors.
// Process is that budget, sized from RLIMIT_NOFILE less a reserve for the
// control plane (the API listener and its clients, the store, the sandbox
// runtime); the daemon calls RaiseFileLimit at start.
//
// A connection over either cap is accepted and closed at once, after a
// best-effort "503 Service Unavailable" that names the limit. It is not
// left waiting in the kernel's accept queue: a waiting connection looks
// like a hang to its client, which then waits for its own timeouts instead
// of learning that it holds too many, and the queue is shared with the
// sandbox's next legitimate connections. Refusing costs the daemon one
// accept, write and close per attempt, paid at the rate the client
// connects; the accept loop never spins on its own, and an accept error
// (EMFILE) is returned to http.Server, which backs off.
//
// # Timeouts
//
// NewServer (and Serve) set the timeouts a hostile client needs:
//
//   - HeaderTimeout: the time to send a request's head (for a new
//     connection, counted from the accept).
//   - IdleTimeout: a keep-alive connection idle between requests.
//   - Body (BodyLimits): how long reading a request body may wait for the
//     client, in all (Timeout, extended by received/MinRate) and per read
//     (Idle). Only waiting for the client counts, so a handler that
//     forwards a body to a slow upstream or holds a request while an
//     operator decides is not cut. A body that breaks the limits fails
//     with ErrSlowBody (the failed read also cancels the request's
//     context; Body.Err says why) and its connection is closed.
//   - WriteTimeout: a write to the client that makes no progress (the
//     client stopped reading). It is not a bound on a whole response:
//     streamed responses may last as long as they keep flowing.
//   - MaxHeaderBytes.
//
// GuardBodies and LimitBody apply the body limits to other servers (the
// daemon's API) and per route.
package netlimit
