package envd

import (
	"path"
	"strings"

	"github.com/lizard-build/lizard/api"
)

// uploadTemp starts the name of the temporary file the agent writes an
// upload to before renaming it over its path (internal/agent/files.go).
const uploadTemp = ".lizard-upload-"

// uploads turns a watch's events of an upload into envd's: envd writes a
// file in place (create, write), the agent to a temporary file it then
// renames (its create, write, chmod and rename, then the file's create).
// Code written for E2B waits for the file's write and knows no
// temporary name, so those are dropped and the file's create after a
// temporary's rename is followed by its write. One per watch; not safe
// for concurrent use.
type uploads struct {
	renamed bool // the last event was a temporary file's rename
}

// events returns what envd would have sent for ev, in order.
func (u *uploads) events(ev api.FileEvent) []api.FileEvent {
	if strings.HasPrefix(path.Base(ev.Name), uploadTemp) {
		u.renamed = ev.Type == api.FileRename
		return nil
	}
	if u.renamed && ev.Type == api.FileCreate {
		u.renamed = false
		return []api.FileEvent{ev, {Type: api.FileWrite, Name: ev.Name, Time: ev.Time}}
	}
	u.renamed = false
	return []api.FileEvent{ev}
}
