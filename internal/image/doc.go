// Package image resolves an image reference to a read-only root directory
// for a sandbox, unpacking each image once into a content-addressed cache.
//
// A reference is an OCI image in a registry ("host/repo:tag",
// "host:port/repo@sha256:..."), an OCI layout directory ("dir",
// "dir:tag", "dir@sha256:..."), or an OCI layout or docker save tarball
// ("file.tar", "file.tar:repo:tag"). A plain directory is not an image:
// Resolve says so with ErrNotImage and the caller uses it as it is. From a
// multi-platform index the linux/GOARCH image is taken.
//
// # Cache layout
//
//	<dir>/configs/sha256/<hex>      image configs, by config digest
//	<dir>/layers/sha256/<hex>/fs/   one unpacked layer, by diffID (the digest
//	                                of its uncompressed tar), whiteouts kept
//	                                as empty ".wh.*" marker files
//	<dir>/layers/sha256/<hex>/meta.json  what the layer cost (its size)
//	<dir>/roots/sha256/<hex>/       one image's root, by config digest: its
//	                                layers applied in order
//	<dir>/locks/                    flock files: one per layer and per root
//	<dir>/tmp/                      work in progress, flocked while in use
//
// A layer is unpacked once, whatever image or compression it came in, and
// its tar stream is hashed while it is unpacked: a stream that does not
// hash to its diffID (taken from the config, itself checked against its
// digest) is thrown away. A root is assembled once per config digest by
// hard-linking files from the layer trees into fresh directories (no data
// is copied; both sides are immutable). Layers and roots are built in tmp
// under their flock and renamed into place only when complete and synced,
// so concurrent Resolves (in one process or several) do the work once,
// and a crash leaves at most a tmp entry, which a later Open removes once
// it is a minute old and no live process holds its flock.
// A cached root needs only the manifest to resolve again.
//
// # Safety rules for unpacking
//
// Layers are hostile input. Unpacking never writes outside the tree being
// built:
//   - a leading "/" is dropped (the entry lands inside the tree); a ".."
//     component fails the layer;
//   - every entry is created by name in its parent directory, and parents
//     are opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so a
//     symlink already in the tree is never followed: an entry beneath one
//     fails the layer;
//   - when layers are stacked, one exception: a directory a layer's archive
//     did not list (it only holds "lib/x") over a lower layer's symlink
//     ("lib -> usr/lib", merged /usr) goes where the symlink leads, as in
//     containerd, but resolved with openat2(RESOLVE_IN_ROOT), as if the
//     image's root were "/": it cannot leave the root;
//   - symlinks are stored as they are (absolute or relative) and only ever
//     resolved inside the sandbox;
//   - a hard link must name a non-directory the same layer already holds
//     (an absolute target is read relative to the layer, never the host);
//   - a whiteout must name one plain entry (".wh..." is refused) and only
//     removes entries of lower layers in the image's own root;
//   - device nodes are skipped, setuid and setgid bits dropped, xattrs
//     (and so file capabilities) not kept; uid/gid are kept when running
//     as root, otherwise files belong to the caller;
//   - an image is bounded by Options.MaxImageBytes: an image above it
//     fails with ErrTooLarge and its partial tree is removed.
package image
