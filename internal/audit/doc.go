// Package audit is IronClaw's append-only, hash-chained audit log, kept in
// the audit_log table of the daemon's SQLite store (package store).
//
// Contract:
//
//   - Every record is {seq, time, session, actor, kind, data, prev_hash,
//     hash}. seq counts from 1 with no gaps. prev_hash is the previous
//     record's hash (64 zeros for seq 1) and hash is
//     SHA-256(prev_hash || canonical encoding of the rest), hex-encoded. The
//     encoding is specified in record.go; it does not depend on Go's JSON
//     package or on the Go version, so a verifier can be written in any
//     language.
//   - data is a JSON object stored in canonical form (sorted keys, no
//     insignificant white space, one fixed string escaping), so semantically
//     equal data hashes the same.
//   - Secrets are removed before a record is hashed or written: the Redactor
//     replaces provider keys, bearer tokens, values of secret-named keys and
//     caller-supplied exact secrets with "[REDACTED]". The secret never
//     reaches the database file.
//   - Log.Append is safe for concurrent use and returns only after the
//     transaction holding its record has committed (store runs SQLite with
//     synchronous=FULL, so that means it survives kill -9 and power loss).
//     One committer goroutine assigns seq, chains hashes and writes many
//     pending records in one transaction (group commit), so concurrent
//     appenders share each fsync instead of paying one each.
//   - The table refuses UPDATE and DELETE (triggers). Someone with write
//     access to the file can drop the triggers, or write the file's bytes
//     directly, so Verify recomputes the whole chain and names the first
//     record that was edited, deleted, inserted or moved. What a hash chain
//     cannot show on its own is truncation of the newest records (or of the
//     whole table): compare Result.LastSeq and Result.LastHash with a copy
//     kept elsewhere for that.
//   - Tail, Follow, Verify and Export read through the store's read-only
//     pool and stream rows, so they neither block appends nor hold the whole
//     log in memory.
package audit
