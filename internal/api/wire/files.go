package wire

import "time"

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file, dir, symlink or other
	Size int64  `json:"size"`
	// Mode is the permission bits in octal, e.g. "0644".
	Mode  string    `json:"mode"`
	MTime time.Time `json:"mtime"`
}

// FileList is one page of a directory listing (GET
// /v1/sandboxes/{id}/files?list=1), sorted by name. Next, when set, is the
// ?after= of the next page.
type FileList struct {
	Entries []FileEntry `json:"entries"`
	Next    string      `json:"next,omitempty"`
}
