package wire

import "time"

// CreateVolumeRequest is POST /v1/volumes.
type CreateVolumeRequest struct {
	// Name: 1-63 of a-z, 0-9, '_', '.', '-', starting with a letter or
	// digit; unique on the daemon.
	Name string `json:"name"`
	// Size is the volume's quota: its filesystem's size (a number of bytes
	// or a size string such as "1GiB").
	Size Bytes `json:"size"`
}

// Volume is the API's volume object.
type Volume struct {
	Name      string    `json:"name"`
	Principal string    `json:"principal"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Sandbox is the running sandbox it is mounted in, absent when free.
	Sandbox string `json:"sandbox,omitempty"`
}

// VolumeList is GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// VolumeMount asks a create for a named volume at a path inside the
// sandbox: under /workspace, or a new top-level directory.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}
