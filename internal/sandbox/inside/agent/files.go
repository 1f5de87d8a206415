package agent

import (
	"encoding/json"
	"io"
	"os"
	"strconv"

	"github.com/ironclaw/ironclaw/internal/sandbox/inside/files"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The file modes run here, inside the sandbox, with the sandbox's uid and
// view of the filesystem (package files); the data travels on stdin or
// stdout, a failure as a wire.FileError on stderr (see package wire).

// fileMain: write takes path and octal mode; read and list take a path.
func fileMain(mode string, args []string) int {
	if len(args) < 1 {
		return fileFail(&wire.FileError{Code: wire.CodeBadRequest, Err: "no path"})
	}
	p := args[0]
	var err error
	switch mode {
	case wire.ModeWrite:
		perm := uint64(0o644)
		if len(args) > 1 {
			if perm, err = strconv.ParseUint(args[1], 8, 32); err != nil {
				return fileFail(&wire.FileError{Code: wire.CodeBadRequest, Err: "bad mode " + args[1]})
			}
		}
		_, err = files.Upload(p, os.Stdin, uint32(perm))
	case wire.ModeRead:
		var f *os.File
		if f, _, err = files.Open(p); err == nil {
			_, err = io.Copy(os.Stdout, f)
			f.Close()
		}
	case wire.ModeList:
		var l *files.Listing
		if l, err = files.List(p); err == nil {
			err = l.Encode(os.Stdout)
			l.Close()
		}
	}
	if err != nil {
		return fileFail(files.Failure(p, err))
	}
	return 0
}

func fileFail(e *wire.FileError) int {
	_ = json.NewEncoder(os.Stderr).Encode(e)
	return wire.FileFailed
}
