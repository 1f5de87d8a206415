package daemon

import (
	"context"
	"errors"

	"github.com/ironclaw/ironclaw/internal/api"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/store"
	"github.com/ironclaw/ironclaw/internal/volume"
)

// openVolumes opens the data directory's named volumes. A daemon that
// cannot keep volumes (not root, no mkfs.ext4) runs without them and says
// so once; creates that ask for one are then refused.
func openVolumes(ctx context.Context, st *store.Store, dir string, logf func(string, ...any)) (*volumes, error) {
	m, err := volume.New(ctx, st, dir, volume.Options{})
	if errors.Is(err, volume.ErrUnsupported) {
		logf("volumes: off: %v", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, b := range m.Broken() {
		logf("volumes: %v (refused until deleted)", b)
	}
	return &volumes{m}, nil
}

// volumes is the volume manager in the shapes the session manager and the
// API declare.
type volumes struct{ m *volume.Manager }

func (v *volumes) Attach(ctx context.Context, principal, holder string, reqs []session.VolumeMount) ([]sandbox.Mount, error) {
	asked := make([]volume.Mount, len(reqs))
	for i, r := range reqs {
		asked[i] = volume.Mount(r)
	}
	return v.m.Attach(ctx, principal, holder, asked)
}

func (v *volumes) Rehold(holder, sandboxID string) { v.m.Rehold(holder, sandboxID) }
func (v *volumes) Release(holder string)           { v.m.Release(holder) }

func (v *volumes) Create(ctx context.Context, principal, name string, size int64) (api.VolumeInfo, error) {
	vol, err := v.m.Create(ctx, principal, name, size)
	return info(vol), err
}

func (v *volumes) List(ctx context.Context, principal string, all bool) ([]api.VolumeInfo, error) {
	list, err := v.m.List(ctx, principal, all)
	out := make([]api.VolumeInfo, len(list))
	for i, vol := range list {
		out[i] = info(vol)
	}
	return out, err
}

func (v *volumes) Get(ctx context.Context, principal, name string, all bool) (api.VolumeInfo, error) {
	vol, err := v.m.Get(ctx, principal, name, all)
	return info(vol), err
}

func (v *volumes) Delete(ctx context.Context, principal, name string, all bool) error {
	return v.m.Delete(ctx, principal, name, all)
}

func info(v volume.Volume) api.VolumeInfo {
	return api.VolumeInfo{Name: v.Name, Principal: v.Principal, SizeBytes: v.SizeBytes, CreatedAt: v.CreatedAt, Sandbox: v.Sandbox}
}
