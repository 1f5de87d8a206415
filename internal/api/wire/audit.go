package wire

import "encoding/json"

// AuditRecord is one audit log record. Time and Data are exactly what was
// hashed (Time has nine fractional digits), so records kept as received
// still verify.
type AuditRecord struct {
	Seq      int64           `json:"seq"`
	Time     string          `json:"time"`
	Session  string          `json:"session,omitempty"`
	Actor    string          `json:"actor"`
	Kind     string          `json:"kind"`
	Data     json.RawMessage `json:"data"`
	PrevHash string          `json:"prev_hash"`
	Hash     string          `json:"hash"`
	// MAC authenticates Seq and Hash with the daemon's audit key; absent
	// on records written before the daemon had one.
	MAC string `json:"mac,omitempty"`
}

// AuditPage is GET /v1/audit: the records after ?after=, oldest first.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
}

// AuditVerification is the daemon's verdict on its audit log (GET
// /v1/audit/verify); see audit.Result for each field's meaning. When !OK,
// BadSeq, Problem and Reason name the first bad record.
type AuditVerification struct {
	OK            bool             `json:"ok"`
	Checked       int64            `json:"checked"`
	FirstSeq      int64            `json:"first_seq,omitempty"`
	LastSeq       int64            `json:"last_seq"`
	LastHash      string           `json:"last_hash"`
	BadSeq        int64            `json:"bad_seq,omitempty"`
	Problem       string           `json:"problem,omitempty"`
	Reason        string           `json:"reason,omitempty"`
	CheckpointSeq int64            `json:"checkpoint_seq,omitempty"`
	KeyID         string           `json:"key_id,omitempty"`
	Authenticated int64            `json:"authenticated"`
	Legacy        int64            `json:"legacy,omitempty"`
	Checkpoints   AuditCheckpoints `json:"checkpoints"`
}

// AuditCheckpoints is what the daemon found in its checkpoint file.
type AuditCheckpoints struct {
	File       string `json:"file,omitempty"`
	Read       int64  `json:"read"`
	Matched    int64  `json:"matched"`
	NewestSeq  int64  `json:"newest_seq,omitempty"`
	NewestTime string `json:"newest_time,omitempty"`
	Unproven   int64  `json:"unproven"`
}
