// Package engine is a small client of the Docker Engine API: exactly the
// calls the docker sandbox backend makes, on net/http over the daemon's
// unix socket, and nothing else.
//
// # Why not github.com/moby/moby/client
//
// Every process that runs the ironclaw binary (`ironclaw version`, every
// daemon start) runs the package initialisers of everything linked. The
// moby client links github.com/distribution/reference (which compiles its
// regular expressions at init), go-digest, the OCI image spec and
// OpenTelemetry: about 5 ms per process start on a small VM, for a backend
// most runs never use. The Engine API is a stable, versioned HTTP API;
// this package speaks it with the standard library only, and has no
// package-level state that needs an initialiser.
//
// # API version
//
// Ping negotiates the version once: the daemon's Api-Version header,
// capped at MaxVersion (the newest version whose request and reply shapes
// this package was written against; a newer daemon still serves it), and
// refused below MinVersion, 1.41. 1.41 (Docker 20.10) is the first version
// with HostConfig.CgroupnsMode and the stats API's one-shot mode; an older
// daemon would silently ignore the cgroup namespace the seal asks for, so
// it is refused rather than half-served. Pinning one version instead would
// not do: Docker 29 no longer serves API versions below 1.44. Until Ping
// succeeds, requests use MinVersion.
//
// # Errors
//
// A reply with a status of 400 or more is an *Error carrying the status
// and the daemon's message; errors.Is classifies it against ErrNotFound
// (404), ErrConflict (409), ErrInvalidArgument (any other 4xx) and
// ErrInternal (5xx), as containerd's errdefs classified the moby client's
// errors. Its text is "Error response from daemon: <message>", as the
// moby client's was, so what callers match in messages ("already paused",
// "not paused", the host-exhaustion phrases) is unchanged.
//
// # Bounds
//
// Nothing the daemon sends is read without a bound: error bodies are cut
// at MaxErrorBody, JSON replies at MaxReply (a larger one is an error, not
// a truncated decode), the image import's message stream at MaxReply, a
// wait reply at 64 KiB, and Demux copies each frame of a multiplexed
// stream through a fixed buffer whatever size its header claims (a
// system-error frame's message is cut at MaxErrorBody). Log and exec
// streams themselves are the caller's to bound.
//
// # Exec attach
//
// ExecAttach dials its own connection, sends POST /exec/{id}/start with
// "Connection: Upgrade, Upgrade: tcp" and, on 101 Switching Protocols,
// hands the connection over as a Hijacked stream: what was written to it
// goes to the process's stdin, CloseWrite half-closes it (dockerd passes
// that on as end of file), and its output is multiplexed (Demux) unless
// the exec has a TTY, when it is raw.
package engine
