package agent

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
)

// A file's metadata: string pairs kept with the file as extended
// attributes, so that they follow it through renames, pauses, snapshots
// and forks with no store of the agent's, and go with it when it is
// replaced or removed. The namespace is E2B's envd's (user.e2b.<key>),
// so a file is read the same through either surface, and what code in the
// sandbox sets there itself (setfattr, os.setxattr) is metadata too.
// gVisor keeps user.* attributes on the overlay's upper layer (tmpfs) and
// its checkpoints; a filesystem without them (some volumes) keeps none,
// and the answer then shows none rather than claiming them.
const (
	metadataXattr = "user.e2b."
	// maxMetadataKey is what the kernel's 255-byte attribute name leaves.
	maxMetadataKey = 255 - len(metadataXattr)
	// maxMetadataBytes bounds a file's metadata (names with the prefix,
	// and values): what ext4 keeps in one block, E2B's bound too.
	maxMetadataBytes = 4096
)

// parseMetadata reads an upload's metadata from q's metadata[key]=value
// parameters (OpenAPI's deepObject), nil when there are none.
func parseMetadata(q url.Values) (map[string]string, error) {
	var md map[string]string
	total := 0
	for name, vals := range q {
		key, ok := strings.CutPrefix(name, "metadata[")
		if !ok {
			continue
		}
		key, ok = strings.CutSuffix(key, "]")
		if !ok {
			return nil, fmt.Errorf("%q: want metadata[key]=value", name)
		}
		if len(vals) != 1 {
			return nil, fmt.Errorf("key %q is given %d times; want it once", key, len(vals))
		}
		if key == "" || len(key) > maxMetadataKey {
			return nil, fmt.Errorf("key %q: want 1 to %d bytes", key, maxMetadataKey)
		}
		if err := printable(key); err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		if err := printable(vals[0]); err != nil {
			return nil, fmt.Errorf("the value of key %q: %w", key, err)
		}
		total += len(metadataXattr) + len(key) + len(vals[0])
		if md == nil {
			md = map[string]string{}
		}
		md[key] = vals[0]
	}
	if total > maxMetadataBytes {
		return nil, fmt.Errorf("%d bytes of keys (each counted with its %q prefix) and values; at most %d", total, metadataXattr, maxMetadataBytes)
	}
	return md, nil
}

// printable refuses what is not printable US-ASCII: header-safe, as E2B
// sends metadata in headers, and the same bytes back.
func printable(s string) error {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte 0x%02x at %d is not printable US-ASCII", c, i)
		}
	}
	return nil
}

// setMetadata sets md on the open file f, in keys' order. A filesystem
// without user attributes keeps none: the answer, read back, says so.
func setMetadata(f *os.File, md map[string]string) error {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := unix.Fsetxattr(int(f.Fd()), metadataXattr+k, []byte(md[k]), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return nil
			}
			return &os.PathError{Op: "setxattr", Path: f.Name(), Err: err}
		}
	}
	return nil
}

// readMetadata fills info's Metadata from its file's attributes, best
// effort: a filesystem without them, or one the call's user may not read,
// has none. A symlink described as itself has none (Linux keeps no user
// attributes on links); one resolved is its target's.
func readMetadata(info *api.EntryInfo) {
	if info.Type == "symlink" || info.Type == "other" {
		return
	}
	buf := make([]byte, 1024)
	n, err := unix.Listxattr(info.Path, buf)
	if errors.Is(err, syscall.ERANGE) {
		if n, err = unix.Listxattr(info.Path, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Listxattr(info.Path, buf)
		}
	}
	if err != nil || n == 0 {
		return
	}
	val := make([]byte, maxMetadataBytes)
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		key, ok := strings.CutPrefix(name, metadataXattr)
		if !ok || key == "" {
			continue
		}
		m, err := unix.Getxattr(info.Path, name, val)
		// Set by code in the sandbox, a value may be anything: what
		// is not printable is left out, as the answer is JSON text.
		if err != nil || printable(key) != nil || printable(string(val[:m])) != nil {
			continue
		}
		if info.Metadata == nil {
			info.Metadata = map[string]string{}
		}
		info.Metadata[key] = string(val[:m])
	}
}
