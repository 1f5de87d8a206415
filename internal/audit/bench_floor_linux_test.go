package audit

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// floorRecord is about the size of one stored benchEntry row (its fields,
// hashes and MAC), so the floor writes what one append makes durable.
var floorRecord = []byte(strings.Repeat("x", 420) + "\n")

// BenchmarkFloorFdatasync is the floor BenchmarkAppend/appenders=1 is
// measured against, in the same temp directory's file system: one write
// of a record-sized buffer and one fdatasync per op. mode=append grows the
// file as a log does (each sync also commits the new size); mode=overwrite
// rewrites the same preallocated block, as SQLite's WAL does once it has
// been reset after a checkpoint. mode=overwrite-fsync is overwrite with
// fsync, the call SQLite commits with in this build (see store.Open).
func BenchmarkFloorFdatasync(b *testing.B) {
	for _, mode := range []string{"append", "overwrite", "overwrite-fsync"} {
		b.Run("mode="+mode, func(b *testing.B) {
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			overwrite := mode != "append"
			if overwrite {
				if _, err := f.Write(make([]byte, 4096)); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			fd := int(f.Fd())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if overwrite {
					_, err = f.WriteAt(floorRecord, 0)
				} else {
					_, err = f.Write(floorRecord)
				}
				if err != nil {
					b.Fatal(err)
				}
				if mode == "overwrite-fsync" {
					err = syscall.Fsync(fd)
				} else {
					err = syscall.Fdatasync(fd)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
