package wire

import "time"

// Snapshot is a copy of a sandbox's /workspace (POST
// /v1/sandboxes/{id}/snapshots): its directories and regular files, with
// their permission bits; Skipped counts the symlinks and other entries
// not copied. A create with "snapshot" starts from it.
type Snapshot struct {
	ID        string    `json:"id"`
	Sandbox   string    `json:"sandbox"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	Files     int       `json:"files"`
	Dirs      int       `json:"dirs"`
	Skipped   int       `json:"skipped"`
}

// SnapshotList is GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}
