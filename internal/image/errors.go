package image

import "github.com/ironclaw/ironclaw/internal/errdefs"

// Errors callers can branch on with errors.Is. Every error Resolve returns
// wraps at most one of these and says which image, layer or path failed.
var (
	// ErrNotImage: the reference names no image: a plain directory, a file
	// that is not an image tarball, or a path that does not exist. Callers
	// that also accept a directory root fall back to it on this error.
	ErrNotImage = errdefs.New(errdefs.ErrInvalidArgument, "not an image")
	// ErrNoManifest: the image exists but no manifest matches the request:
	// no linux/GOARCH entry in an index, an unknown tag or digest, or an
	// ambiguous choice.
	ErrNoManifest = errdefs.New(errdefs.ErrNotFound, "no matching manifest")
	// ErrDigestMismatch: a manifest, config or layer did not hash to the
	// digest that names it.
	ErrDigestMismatch = errdefs.New(errdefs.ErrUnavailable, "digest mismatch")
	// ErrUnsafeLayer: a layer tried to reach outside its own tree (a ".."
	// component, an entry beneath a symlink, a hard link to a path it does
	// not hold) or held an invalid whiteout.
	ErrUnsafeLayer = errdefs.New(errdefs.ErrInvalidArgument, "unsafe layer")
	// ErrTooLarge: the image's unpacked size is above Options.MaxImageBytes.
	ErrTooLarge = errdefs.New(errdefs.ErrTooLarge, "image too large")
	// ErrPlainHTTP: a registry request would have used plain HTTP to a host
	// that is neither loopback nor listed in Options.InsecureRegistries.
	ErrPlainHTTP = errdefs.New(errdefs.ErrInvalidArgument, "plain HTTP refused")
)
