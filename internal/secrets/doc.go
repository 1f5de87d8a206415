// Package secrets holds the credentials the daemon brokers for sandboxes
// (issue 15): a sandbox never sees a secret's value, only a per-sandbox
// placeholder in its environment, and the egress broker swaps the
// placeholder for the value in requests to the secret's hosts alone.
//
// A Store keeps the secrets: metadata (name, hosts, env, header, format,
// grant) and a value of at most MaxValueBytes. Values are sealed with
// AES-256-GCM under a key kept in a file outside the data directory (the
// same custody rule as the audit key: see LoadKey), one random nonce per
// record, and the record's metadata as associated data, so a file edited
// to send a value to another host does not open. The file is replaced
// atomically (temporary file, fsync, rename, fsync of the directory): a
// crash leaves the old set or the new one, never half of either. Secrets
// the policy file lists are read-only (ErrReadOnly) and live in memory
// only. Values are opened only to be injected; no method returns one to a
// caller outside this package, and no error, log line or audit record
// carries one (the audit records of Set and Remove hold the name and the
// hosts).
//
// Grants tie secrets to sandboxes. A create asks for secrets by name;
// each gets a placeholder "ironclaw-secret-<name>-<32 hex>" unique to
// (sandbox, secret), which the sandbox's every command sees in the
// secret's env variable. A secret with grant "all" is granted at once; one
// with grant "ask" files one secret.use approval per (sandbox, secret) and
// stays pending until an operator decides: a request carrying its
// placeholder waits for the decision. Grants implements the broker's
// Secrets interface (Intercept, Swap, Contains); a placeholder sent to a
// host its secret does not list is refused as misuse, whatever the grant.
// Rotation (Set again) takes effect at once: the broker opens the current
// value for every request.
//
// Bounds: MaxSecrets secrets in all, MaxHosts hosts per secret,
// MaxPerSandbox secrets per sandbox, MaxValueBytes per value; pending
// approvals are the gateway's quotas. Store and Grants are safe for
// concurrent use.
package secrets
