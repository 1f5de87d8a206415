package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ironclaw/ironclaw/internal/api/wire"
)

// Volume is a named persistent volume.
type Volume = wire.Volume

// VolumeMount asks a create for a volume at a path inside the sandbox.
type VolumeMount = wire.VolumeMount

func volumePath(name string) string { return "/v1/volumes/" + url.PathEscape(name) }

// CreateVolume makes a volume of size bytes (its quota).
func (c *Client) CreateVolume(ctx context.Context, name string, size int64) (Volume, error) {
	var v Volume
	err := c.doJSON(ctx, agent, http.MethodPost, "/v1/volumes", nil, wire.CreateVolumeRequest{Name: name, Size: wire.Bytes(size)}, &v)
	return v, err
}

// ListVolumes lists the caller's volumes (an operator's: all).
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var out wire.VolumeList
	err := c.doJSON(ctx, agent, http.MethodGet, "/v1/volumes", nil, nil, &out)
	return out.Volumes, err
}

// GetVolume describes a volume.
func (c *Client) GetVolume(ctx context.Context, name string) (Volume, error) {
	var v Volume
	err := c.doJSON(ctx, agent, http.MethodGet, volumePath(name), nil, nil, &v)
	return v, err
}

// DeleteVolume removes a volume and its files; refused while a running
// sandbox has it mounted.
func (c *Client) DeleteVolume(ctx context.Context, name string) (Volume, error) {
	var v Volume
	err := c.doJSON(ctx, agent, http.MethodDelete, volumePath(name), nil, nil, &v)
	return v, err
}
