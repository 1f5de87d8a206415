package engine

// The request and reply shapes, trimmed to the fields the docker backend
// uses. Field names and JSON names are the Engine API's (as in
// github.com/moby/moby/api/types): a field left out is sent as absent,
// which the daemon reads as the zero value the moby types would have sent.

// Config is a container's portable configuration (the create request's
// top level).
type Config struct {
	Hostname   string
	User       string
	Env        []string
	Cmd        []string
	Image      string
	WorkingDir string
	Entrypoint []string
	Labels     map[string]string
}

// HostConfig is a container's host-dependent configuration.
type HostConfig struct {
	Resources
	LogConfig      LogConfig
	NetworkMode    string
	RestartPolicy  RestartPolicy
	CapAdd         []string
	CapDrop        []string
	CgroupnsMode   string
	GroupAdd       []string
	IpcMode        string
	Privileged     bool
	ReadonlyRootfs bool
	SecurityOpt    []string
	Tmpfs          map[string]string `json:",omitempty"`
	Sysctls        map[string]string `json:",omitempty"`
	Runtime        string            `json:",omitempty"`
	Mounts         []Mount           `json:",omitempty"`
	// MaskedPaths and ReadonlyPaths replace the daemon's defaults when not
	// null (so never omitempty: an empty list means none).
	MaskedPaths   []string
	ReadonlyPaths []string
}

// Resources are a container's cgroup limits and ulimits.
type Resources struct {
	Memory     int64
	NanoCPUs   int64 `json:"NanoCpus"`
	CpusetCpus string
	MemorySwap int64
	PidsLimit  *int64
	Ulimits    []*Ulimit
}

// Ulimit is one rlimit of the container's processes.
type Ulimit struct {
	Name string
	Hard int64
	Soft int64
}

// RestartPolicy says whether dockerd restarts the container.
type RestartPolicy struct {
	Name string
}

// LogConfig is the container's log driver and its options.
type LogConfig struct {
	Type   string
	Config map[string]string
}

// Mount is one mount of a container (HostConfig.Mounts).
type Mount struct {
	Type        string       `json:",omitempty"`
	Source      string       `json:",omitempty"`
	Target      string       `json:",omitempty"`
	ReadOnly    bool         `json:",omitempty"`
	BindOptions *BindOptions `json:",omitempty"`
}

// BindOptions are a bind mount's options.
type BindOptions struct {
	Propagation string `json:",omitempty"`
}

// createRequest is POST /containers/create's body.
type createRequest struct {
	*Config
	HostConfig *HostConfig `json:",omitempty"`
}

// CreateResponse is what ContainerCreate returns.
type CreateResponse struct {
	ID       string `json:"Id"`
	Warnings []string
}

// Info is GET /info's reply, trimmed.
type Info struct {
	OSType          string
	ServerVersion   string
	NCPU            int
	SecurityOptions []string
	Runtimes        map[string]RuntimeInfo
}

// RuntimeInfo is one OCI runtime registered with dockerd.
type RuntimeInfo struct {
	Path string `json:"path"`
}

// ContainerSummary is one container of ContainerList.
type ContainerSummary struct {
	ID     string `json:"Id"`
	Labels map[string]string
}

// ContainerInspect is GET /containers/{id}/json's reply, trimmed.
type ContainerInspect struct {
	ID    string `json:"Id"`
	State *ContainerState
}

// ContainerState is a container's run state.
type ContainerState struct {
	Status  string
	Running bool
	Paused  bool
	Pid     int
}

// ExecConfig is POST /containers/{id}/exec's body.
type ExecConfig struct {
	User         string
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
	Tty          bool
	Env          []string
	WorkingDir   string
	Cmd          []string
}

// ExecInspect is GET /exec/{id}/json's reply, trimmed.
type ExecInspect struct {
	ID       string
	Running  bool
	ExitCode int
}

// Stats is one sample of GET /containers/{id}/stats, trimmed.
type Stats struct {
	MemoryStats struct {
		Usage    uint64 `json:"usage"`
		MaxUsage uint64 `json:"max_usage"`
	} `json:"memory_stats"`
	CPUStats struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
	} `json:"cpu_stats"`
	PidsStats struct {
		Current uint64 `json:"current"`
	} `json:"pids_stats"`
}

// WaitResult is the end of a ContainerWait: the container's exit status,
// or why waiting failed.
type WaitResult struct {
	StatusCode int64
	Err        error
}
