package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Info is GET /info: the daemon's version, CPUs, runtimes and security
// options.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var in Info
	err := c.call(ctx, http.MethodGet, "/info", nil, nil, &in, MaxReply)
	return in, err
}

// ContainerCreate creates (does not start) a container named name.
// Capabilities are normalised as the docker CLI does ("CAP_" prefix,
// upper case, sorted, no duplicates).
func (c *Client) ContainerCreate(ctx context.Context, name string, cfg *Config, hc *HostConfig) (CreateResponse, error) {
	if cfg == nil || cfg.Image == "" {
		return CreateResponse{}, fmt.Errorf("%w: a container needs an image", ErrInvalidArgument)
	}
	if hc != nil {
		n := *hc
		n.CapAdd, n.CapDrop = normalizeCaps(hc.CapAdd), normalizeCaps(hc.CapDrop)
		hc = &n
	}
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	var res CreateResponse
	err := c.call(ctx, http.MethodPost, "/containers/create", q, createRequest{Config: cfg, HostConfig: hc}, &res, MaxReply)
	return res, err
}

func normalizeCaps(caps []string) []string {
	if caps == nil {
		return nil
	}
	out := make([]string, len(caps))
	for i, c := range caps {
		c = strings.ToUpper(c)
		if c != "ALL" && !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out[i] = c
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ContainerStart starts a container; one already running is not an error
// (dockerd answers 304).
func (c *Client) ContainerStart(ctx context.Context, id string) error {
	return c.post(ctx, "/containers/"+id+"/start", nil)
}

// ContainerPause freezes a container's processes.
func (c *Client) ContainerPause(ctx context.Context, id string) error {
	return c.post(ctx, "/containers/"+id+"/pause", nil)
}

// ContainerUnpause thaws a paused container.
func (c *Client) ContainerUnpause(ctx context.Context, id string) error {
	return c.post(ctx, "/containers/"+id+"/unpause", nil)
}

func (c *Client) post(ctx context.Context, path string, q url.Values) error {
	return c.call(ctx, http.MethodPost, path, q, nil, nil, MaxReply)
}

// ContainerRemove removes a container; force kills it first, volumes
// removes its anonymous volumes.
func (c *Client) ContainerRemove(ctx context.Context, id string, force, volumes bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "1")
	}
	if volumes {
		q.Set("v", "1")
	}
	return c.call(ctx, http.MethodDelete, "/containers/"+id, q, nil, nil, MaxReply)
}

// ContainerInspect is GET /containers/{id}/json.
func (c *Client) ContainerInspect(ctx context.Context, id string) (ContainerInspect, error) {
	var in ContainerInspect
	err := c.call(ctx, http.MethodGet, "/containers/"+id+"/json", nil, nil, &in, MaxReply)
	return in, err
}

// ContainerList lists containers (all: stopped ones too) carrying every
// one of labels ("key" or "key=value").
func (c *Client) ContainerList(ctx context.Context, all bool, labels ...string) ([]ContainerSummary, error) {
	q := url.Values{}
	if all {
		q.Set("all", "1")
	}
	if len(labels) > 0 {
		f := map[string]map[string]bool{"label": {}}
		for _, l := range labels {
			f["label"][l] = true
		}
		data, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		q.Set("filters", string(data))
	}
	var list []ContainerSummary
	err := c.call(ctx, http.MethodGet, "/containers/json", q, nil, &list, MaxReply)
	return list, err
}

// ContainerWait waits for a container to reach condition ("next-exit",
// "not-running", "removed"). It returns once dockerd has registered the
// wait (so a ContainerStart sent after it cannot be missed); the result
// arrives on the channel, which receives exactly one value. Cancelling ctx
// ends the wait with ctx's error.
func (c *Client) ContainerWait(ctx context.Context, id, condition string) (<-chan WaitResult, error) {
	q := url.Values{}
	if condition != "" {
		q.Set("condition", condition)
	}
	resp, err := c.roundTrip(ctx, http.MethodPost, "/containers/"+id+"/wait", q, nil, nil, true)
	if err != nil {
		return nil, err
	}
	ch := make(chan WaitResult, 1)
	go func() {
		defer resp.Body.Close()
		var w struct {
			StatusCode int64
			Error      *struct{ Message string }
		}
		if err := decodeBounded(resp.Body, &w, maxWaitReply); err != nil {
			ch <- WaitResult{Err: err}
			return
		}
		if w.Error != nil && w.Error.Message != "" {
			ch <- WaitResult{StatusCode: w.StatusCode, Err: errors.New(w.Error.Message)}
			return
		}
		ch <- WaitResult{StatusCode: w.StatusCode}
	}()
	return ch, nil
}

// ContainerLogs returns a container's output so far, multiplexed (Demux;
// the backend's containers have no TTY): stdout and stderr, the last tail
// lines ("" all). The caller closes it and bounds what it reads.
func (c *Client) ContainerLogs(ctx context.Context, id string, tail string) (io.ReadCloser, error) {
	q := url.Values{"stdout": {"1"}, "stderr": {"1"}}
	if tail != "" && tail != "all" {
		q.Set("tail", tail)
	}
	resp, err := c.roundTrip(ctx, http.MethodGet, "/containers/"+id+"/logs", q, nil, nil, true)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ContainerStats takes one stats sample, without waiting for a second
// (one-shot: the CPU figures are totals, not rates).
func (c *Client) ContainerStats(ctx context.Context, id string) (Stats, error) {
	var s Stats
	q := url.Values{"stream": {"false"}, "one-shot": {"true"}}
	err := c.call(ctx, http.MethodGet, "/containers/"+id+"/stats", q, nil, &s, MaxReply)
	return s, err
}

// ExecCreate creates (does not start) an exec in a running container and
// returns its ID.
func (c *Client) ExecCreate(ctx context.Context, containerID string, cfg ExecConfig) (string, error) {
	var res struct {
		ID string `json:"Id"`
	}
	if err := c.call(ctx, http.MethodPost, "/containers/"+containerID+"/exec", nil, cfg, &res, MaxReply); err != nil {
		return "", err
	}
	if res.ID == "" {
		return "", errors.New("the daemon created an exec without an ID")
	}
	return res.ID, nil
}

// ExecAttach starts an exec attached to its streams (see Hijacked). tty
// must be the exec's own Tty setting: it says how its output is framed.
// ctx bounds the start only.
func (c *Client) ExecAttach(ctx context.Context, execID string, tty bool) (*Hijacked, error) {
	conn, br, err := c.hijack(ctx, "/exec/"+execID+"/start", struct{ Detach, Tty bool }{false, tty})
	if err != nil {
		return nil, err
	}
	return &Hijacked{conn: conn, r: br, tty: tty}, nil
}

// ExecInspect is GET /exec/{id}/json: whether the exec still runs and its
// exit code.
func (c *Client) ExecInspect(ctx context.Context, execID string) (ExecInspect, error) {
	var in ExecInspect
	err := c.call(ctx, http.MethodGet, "/exec/"+execID+"/json", nil, nil, &in, MaxReply)
	return in, err
}

// ImageExists reports whether the daemon has the image ref (GET
// /images/{ref}/json); a missing image is (false, nil).
func (c *Client) ImageExists(ctx context.Context, ref string) (bool, error) {
	err := c.call(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, nil, MaxReply)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, err
}

// ImageImport creates the image ref ("repo:tag") from the tar archive
// src, with message as its history's comment (POST /images/create
// ?fromSrc=-). dockerd reports a failure inside its reply's message
// stream, which is read (bounded) to its end.
func (c *Client) ImageImport(ctx context.Context, src io.Reader, ref, message string) error {
	q := url.Values{"fromSrc": {"-"}, "repo": {ref}}
	if message != "" {
		q.Set("message", message)
	}
	resp, err := c.roundTrip(ctx, http.MethodPost, "/images/create", q, http.Header{"Content-Type": {"application/x-tar"}}, src, true)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	lr := &io.LimitedReader{R: resp.Body, N: MaxReply + 1}
	dec := json.NewDecoder(lr)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF && lr.N > 0 {
			return nil
		} else if err != nil {
			if lr.N <= 0 {
				return fmt.Errorf("%w: the import's messages exceed %d bytes", ErrReplyTooLarge, MaxReply)
			}
			return fmt.Errorf("decoding the import's messages: %w", err)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
		if m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
	}
}
