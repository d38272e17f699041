// Package template builds and caches the root filesystems sandboxes boot from.
//
// STUB: the signatures below are the contract; the implementation is being written.
package template

import (
	"context"
	"errors"
	"io"
)

// ErrUnknown means no template has that name.
var ErrUnknown = errors.New("unknown template")

// Default is the template sandboxes use when none is named.
const Default = "interpreter"

// DefaultCacheDir is shared by every data directory on the machine so that
// a template is built once.
const DefaultCacheDir = "/var/cache/lizard"

// Names lists the templates Lizard can build.
func Names() []string { return []string{Default} }

// Ensure returns the root filesystem of the named template, building it
// first (writing progress to progress) if the cache has no build of its
// current recipe. Safe when several processes call it at once.
func Ensure(ctx context.Context, cacheDir, name string, progress io.Writer) (rootfs string, err error) {
	return "", errors.New("template: not implemented")
}
