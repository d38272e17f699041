package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// identity is who runs the code and owns the files made through the API.
type identity struct {
	name     string
	uid, gid int
	home     string
	// cred is nil when code runs as the agent's own user.
	cred *syscall.Credential
}

// lookupIdentity resolves the configured user. A user missing from
// /etc/passwd (tests on a host) or one the agent cannot switch to (it is not
// root) falls back to the agent's own user with a warning.
func lookupIdentity(name, home string, log *slog.Logger) identity {
	self := func() identity {
		id := identity{uid: os.Getuid(), gid: os.Getgid(), home: home}
		if u, err := user.LookupId(strconv.Itoa(id.uid)); err == nil {
			id.name = u.Username
			if id.home == "" {
				id.home = u.HomeDir
			}
		}
		if id.home == "" {
			id.home, _ = os.UserHomeDir()
		}
		if id.home == "" {
			id.home = "/"
		}
		return id
	}
	if name == "" {
		return self()
	}
	u, err := user.Lookup(name)
	if _, nerr := strconv.Atoi(name); err != nil && nerr == nil {
		u, err = user.LookupId(name) // an image's USER may be a uid
	}
	if err != nil {
		log.Warn("code user not found; running code as the agent's own user", "user", name, "err", err)
		return self()
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	id := identity{name: u.Username, uid: uid, gid: gid, home: home}
	if id.home == "" {
		id.home = u.HomeDir
	}
	if uid == os.Geteuid() {
		return id
	}
	if os.Geteuid() != 0 {
		log.Warn("agent is not root; running code as the agent's own user", "user", name)
		s := self()
		s.home = id.home
		return s
	}
	var groups []uint32
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.Atoi(g); err == nil {
				groups = append(groups, uint32(n))
			}
		}
	}
	id.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}
	return id
}

// displayName names the user in messages.
func (id identity) displayName() string {
	if id.name != "" {
		return id.name
	}
	return "uid " + strconv.Itoa(id.uid)
}

// canEnter returns an error saying why the code's user cannot make dir
// its working directory: chdir needs search permission on dir and on every
// directory above it. Root (and an agent running code as itself, which the
// kernel checks directly) passes by the kernel's own rules.
func (id identity) canEnter(dir string) error {
	if id.cred == nil {
		if err := unix.Access(dir, unix.X_OK); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		return nil
	}
	if id.uid == 0 {
		return nil
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // not a Unix file system: let the start tell
		}
		var bit os.FileMode
		switch {
		case int(st.Uid) == id.uid:
			bit = 0o100
		case st.Gid == uint32(id.gid) || slices.Contains(id.cred.Groups, st.Gid):
			bit = 0o010
		default:
			bit = 0o001
		}
		if fi.Mode().Perm()&bit == 0 {
			return fmt.Errorf("%s: %w", p, os.ErrPermission)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// chown gives path to the code's user; a no-op when code runs as the agent.
func (id identity) chown(path string) error {
	if id.cred == nil {
		return nil
	}
	if err := os.Lchown(path, id.uid, id.gid); err != nil {
		return fmt.Errorf("chowning %s: %w", path, err)
	}
	return nil
}

// mkdirAll is os.MkdirAll that gives every directory it creates to the user.
func (id identity) mkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := id.mkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil // lost a race with another creator
		}
		return err
	}
	return id.chown(dir)
}

// buildEnv is the environment of every kernel and process: the sandbox's
// envs, then HOME, USER, LOGNAME, a PATH with the Python venv first, and
// LANG unless the sandbox set it.
func buildEnv(base []string, id identity, python string) []string {
	env := make(map[string]string)
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.HasPrefix(k, "LIZARD_AGENT_") {
			continue
		}
		set(k, v)
	}
	set("HOME", id.home)
	if id.name != "" {
		set("USER", id.name)
		set("LOGNAME", id.name)
	}
	path := env["PATH"]
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	if filepath.IsAbs(python) {
		venv := filepath.Dir(python)
		if !strings.HasPrefix(path, venv+":") {
			path = venv + ":" + path
		}
	}
	set("PATH", path)
	if env["LANG"] == "" {
		set("LANG", "C.UTF-8")
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out
}

// withEnvs returns env with extra set on top (replacing earlier values).
func withEnvs(env []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return env
	}
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds file on the PATH the code gets, not the agent's own: the
// venv (which may carry node) comes first there.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(getenv(env, "PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: %w", file, exec.ErrNotFound)
}
