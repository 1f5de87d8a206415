package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// The bodies of privileged requests are validated when they are filed and
// stored as the approval's data; the daemon's actions decode that data
// again with the exported functions below, so what runs is exactly what the
// operator saw.

// spawnBody is POST /v1/agents: a create request plus the command.
type spawnBody struct {
	createBody
	Cmd  *string  `json:"cmd,omitempty"`
	Argv []string `json:"argv,omitempty"`
}

func decodeSpawn(raw []byte) (spawnBody, session.CreateRequest, []string, error) {
	var b spawnBody
	if err := decodeJSON(bytesReader(raw), &b); err != nil {
		if err == io.EOF {
			return b, session.CreateRequest{}, nil, badRequest("empty body: a command (cmd or argv) is required")
		}
		return b, session.CreateRequest{}, nil, err
	}
	argv, _, err := commandArgv(b.Cmd, b.Argv)
	if err != nil {
		return b, session.CreateRequest{}, nil, err
	}
	req, err := b.request()
	if err != nil {
		return b, req, nil, err
	}
	return b, req, argv, nil
}

// DecodeSpawn reads an agent.spawn approval's data: the sandbox to create
// and the command to run in it.
func DecodeSpawn(data []byte) (session.CreateRequest, []string, error) {
	_, req, argv, err := decodeSpawn(data)
	return req, argv, err
}

func spawnLine(b spawnBody) string {
	if b.Cmd != nil {
		return *b.Cmd
	}
	return strings.Join(b.Argv, " ")
}

// widenLimitsBody is POST /v1/sandboxes/{id}/limits: the limits a running
// sandbox can change.
type widenLimitsBody struct {
	Memory  size     `json:"memory,omitempty"`
	Pids    int64    `json:"pids,omitempty"`
	CPUs    float64  `json:"cpus,omitempty"`
	Timeout duration `json:"timeout,omitempty"`
	Output  size     `json:"output,omitempty"`
}

func decodeWidenLimits(raw []byte) (widenLimitsBody, sandbox.Limits, error) {
	var b widenLimitsBody
	if err := decodeJSON(bytesReader(raw), &b); err != nil {
		if err == io.EOF {
			return b, sandbox.Limits{}, badRequest("empty body: give memory, pids, cpus, timeout or output")
		}
		return b, sandbox.Limits{}, err
	}
	if b.Pids < 0 || b.CPUs < 0 || math.IsNaN(b.CPUs) {
		return b, sandbox.Limits{}, badRequest("limits must not be negative")
	}
	l := sandbox.Limits{MemoryBytes: int64(b.Memory), Pids: b.Pids, CPUs: b.CPUs, Timeout: time.Duration(b.Timeout), OutputBytes: int64(b.Output)}
	if l == (sandbox.Limits{}) {
		return b, l, badRequest("give at least one of memory, pids, cpus, timeout, output")
	}
	// Check each given limit against the maxima by validating a full set
	// in which the others take their defaults.
	check := sandbox.DefaultLimits
	for _, f := range []struct {
		v   bool
		set func()
	}{
		{l.MemoryBytes != 0, func() { check.MemoryBytes = l.MemoryBytes }},
		{l.Pids != 0, func() { check.Pids = l.Pids }},
		{l.CPUs != 0, func() { check.CPUs = l.CPUs }},
		{l.Timeout != 0, func() { check.Timeout = l.Timeout }},
		{l.OutputBytes != 0, func() { check.OutputBytes = l.OutputBytes }},
	} {
		if f.v {
			f.set()
		}
	}
	if err := check.Validate(); err != nil {
		return b, l, badRequest(strings.TrimPrefix(err.Error(), sandbox.ErrInvalidSpec.Error()+": "))
	}
	return b, l, nil
}

// DecodeWidenLimits reads the limits of a sandbox.widen approval's data.
func DecodeWidenLimits(data []byte) (sandbox.Limits, error) {
	_, l, err := decodeWidenLimits(data)
	return l, err
}

// WidenData is a sandbox.widen approval's data: more egress rules or new
// limits.
type WidenData struct {
	EgressAllow []string        `json:"egress_allow,omitempty"`
	Limits      json.RawMessage `json:"limits,omitempty"`
}

// DecodeWiden reads a sandbox.widen approval's data.
func DecodeWiden(data []byte) (rules []string, limits *sandbox.Limits, err error) {
	var d WidenData
	if err := decodeJSON(bytesReader(data), &d); err != nil {
		return nil, nil, fmt.Errorf("sandbox.widen data: %w", err)
	}
	if len(d.Limits) > 0 {
		l, err := DecodeWidenLimits(d.Limits)
		if err != nil {
			return nil, nil, err
		}
		limits = &l
	}
	return d.EgressAllow, limits, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
