package netns

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// dumpTries bounds how often a netlink listing is asked again.
const dumpTries = 10

// retryDump returns list's answer, asking again while the kernel reports
// the dump was interrupted: a listing of addresses or routes that races
// another change of them (a burst of sandboxes coming and going changes
// them constantly) ends with NLM_F_DUMP_INTR and possibly inconsistent
// results, which netlink returns as ErrDumpInterrupted. The listing is
// cheap and a quiet moment comes soon; only an interruption every time
// is an error.
func retryDump[T any](list func() ([]T, error)) ([]T, error) {
	var err error
	for range dumpTries {
		var out []T
		if out, err = list(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}
