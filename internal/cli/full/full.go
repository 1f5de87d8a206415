// Package full is the part of the ironclaw command line that only the
// ironclaw-full binary links: what needs the daemon, its SQLite store, the
// audit log's verifier or the image registry client. Their package
// initialisers alone (SQLite's C runtime, the E2B protocol's descriptors,
// the registry client's regular expressions) would more than double the
// start of every other command, so the ironclaw binary (package cli
// without this one) hands these commands to ironclaw-full.
//
// Commands implements cli.Full; cmd/ironclaw-full passes it to cli.Exit.
package full

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemon"
	"github.com/ironclaw/ironclaw/internal/image"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/spf13/cobra"
)

// Commands is the heavy part of the command line. The zero value is ready.
type Commands struct{}

// ServeCommand is 'ironclaw serve'; diagnostics go to stderr.
func (Commands) ServeCommand(stderr io.Writer) *cobra.Command { return serveCommand(stderr) }

// AddOperator writes operators/NAME.token into the data directory.
func (Commands) AddOperator(dataDir, name string) (string, error) {
	return daemon.AddOperator(dataDir, name)
}

// AddAgent writes agents/NAME.token into the data directory.
func (Commands) AddAgent(dataDir, name string) (string, error) {
	return daemon.AddAgent(dataDir, name)
}

// VerifyOffline checks an audit export (file) or a data directory's
// database, read-only, without a daemon. With dataDir, keyFile and
// checkpointFile default to the daemon's.
func (Commands) VerifyOffline(ctx context.Context, file, dataDir, keyFile, checkpointFile string) (client.VerifyResult, error) {
	if dataDir != "" {
		if keyFile == "" {
			keyFile = audit.DefaultKeyFile()
		}
		if checkpointFile == "" {
			checkpointFile = audit.DefaultCheckpointFile(dataDir)
		}
	}
	var opts audit.VerifyOptions
	if keyFile != "" {
		k, err := audit.LoadKey(keyFile)
		if err != nil {
			return client.VerifyResult{}, err
		}
		opts.Key = k
	}
	opts.CheckpointFile = checkpointFile
	var (
		res audit.Result
		err error
	)
	if file != "" {
		f, ferr := os.Open(file)
		if ferr != nil {
			return client.VerifyResult{}, ferr
		}
		defer f.Close()
		res, err = audit.VerifyExport(ctx, f, opts)
	} else {
		res, err = audit.VerifyDatabase(ctx, filepath.Join(dataDir, daemon.DatabaseFile), opts)
	}
	if err != nil {
		return client.VerifyResult{}, err
	}
	// audit.Result and client.VerifyResult are the same JSON.
	var v client.VerifyResult
	b, err := json.Marshal(res)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	return v, err
}

// ResolveImage turns run's --image ref (already checked by the CLI) into a
// root. The caller of a one-shot run is the operator, so any local path
// and any registry will do; images are unpacked once into
// $XDG_CACHE_HOME/ironclaw/images.
func (Commands) ResolveImage(ctx context.Context, ref string) (sandbox.Root, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return sandbox.Root{}, fmt.Errorf("--image: no cache directory for images: %w", err)
	}
	st, err := image.Open(filepath.Join(cache, "ironclaw", "images"), image.Options{})
	if err != nil {
		return sandbox.Root{}, fmt.Errorf("--image: %w", err)
	}
	roots := &image.Roots{Store: st, AnyLocal: true, AnyRegistry: true}
	root, err := roots.Root(ctx, ref)
	if err != nil {
		return sandbox.Root{}, fmt.Errorf("--image: %w", err)
	}
	return root, nil
}
