package image

import "errors"

// Errors callers can branch on with errors.Is. Every error Resolve returns
// wraps at most one of these and says which image, layer or path failed.
var (
	// ErrNotImage: the reference names no image: a plain directory, a file
	// that is not an image tarball, or a path that does not exist. Callers
	// that also accept a directory root fall back to it on this error.
	ErrNotImage = errors.New("not an image")
	// ErrNoManifest: the image exists but no manifest matches the request:
	// no linux/GOARCH entry in an index, an unknown tag or digest, or an
	// ambiguous choice.
	ErrNoManifest = errors.New("no matching manifest")
	// ErrDigestMismatch: a manifest, config or layer did not hash to the
	// digest that names it.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrUnsafeLayer: a layer tried to reach outside its own tree (a ".."
	// component, an entry beneath a symlink, a hard link to a path it does
	// not hold) or held an invalid whiteout.
	ErrUnsafeLayer = errors.New("unsafe layer")
	// ErrTooLarge: the image's unpacked size is above Options.MaxImageBytes.
	ErrTooLarge = errors.New("image too large")
	// ErrPlainHTTP: a registry request would have used plain HTTP to a host
	// that is neither loopback nor listed in Options.InsecureRegistries.
	ErrPlainHTTP = errors.New("plain HTTP refused")
)
