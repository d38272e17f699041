package pid1

import (
	"errors"
	"io/fs"
	"os"
)

// NameServer is the resolver a sandbox's /etc/resolv.conf names: the node
// redirects a sandbox's DNS to its own resolver when the sandbox has a
// network policy by name, and refuses this address at once otherwise
// (netns.NameServer, which a test keeps equal).
const NameServer = "169.254.0.53"

// WriteResolvConf gives the sandbox an /etc/resolv.conf naming NameServer
// when its template has none (templates ship without one: the host's
// would name resolvers a sandbox cannot reach). One the template or the
// code wrote is left alone; the node redirects DNS whatever it says.
func WriteResolvConf(path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, []byte("nameserver "+NameServer+"\noptions timeout:2 attempts:2\n"), 0o644)
}
