package sudo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// securePath is the PATH a command gets and is looked up on, whatever the
// caller's, as Debian's sudoers sets it (secure_path).
const securePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// kept are the caller's variables a command keeps without -E, as sudo's
// env_reset keeps them.
var kept = []string{"TERM", "DISPLAY", "COLORS", "LS_COLORS", "LANG", "LANGUAGE", "TZ", "XAUTHORITY", "XAUTHORIZATION", "COLORTERM"}

// account is a user of the sandbox's /etc/passwd.
type account struct {
	name     string
	uid, gid int
	home     string
	shell    string
	groups   []uint32 // the primary group and every /etc/group naming the user
}

// accounts reads the sandbox's users. The agent reads them at each sudo:
// code may add users (useradd) and sudo to them, as on E2B.
type accounts struct {
	passwd, group string // "": /etc/passwd, /etc/group
}

// lookup finds a user by name or, as #uid, by uid.
func (a accounts) lookup(spec string) (account, error) {
	byUID := -1
	if n, ok := strings.CutPrefix(spec, "#"); ok {
		uid, err := strconv.Atoi(n)
		if err != nil || uid < 0 {
			return account{}, fmt.Errorf("sudo: unknown user %s", spec)
		}
		byUID = uid
	}
	acct, err := a.find(func(name string, uid int) bool {
		if byUID >= 0 {
			return uid == byUID
		}
		return name == spec
	})
	if err != nil {
		return account{}, err
	}
	if acct.name == "" {
		return account{}, fmt.Errorf("sudo: unknown user %s", spec)
	}
	return acct, nil
}

// find returns the first passwd entry match accepts (zero when none),
// with its groups.
func (a accounts) find(match func(name string, uid int) bool) (account, error) {
	path := a.passwd
	if path == "" {
		path = "/etc/passwd"
	}
	f, err := os.Open(path)
	if err != nil {
		return account{}, fmt.Errorf("sudo: reading %s: %v", path, err)
	}
	defer f.Close()
	var acct account
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 7 {
			continue
		}
		uid, err1 := strconv.Atoi(fs[2])
		gid, err2 := strconv.Atoi(fs[3])
		if err1 != nil || err2 != nil || !match(fs[0], uid) {
			continue
		}
		acct = account{name: fs[0], uid: uid, gid: gid, home: fs[5], shell: fs[6]}
		break
	}
	if err := sc.Err(); err != nil {
		return account{}, fmt.Errorf("sudo: reading %s: %v", path, err)
	}
	if acct.name == "" {
		return acct, nil
	}
	acct.groups = append(acct.groups, uint32(acct.gid))
	gpath := a.group
	if gpath == "" {
		gpath = "/etc/group"
	}
	g, err := os.Open(gpath)
	if err != nil {
		return acct, nil // the primary group alone
	}
	defer g.Close()
	sc = bufio.NewScanner(g)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 4 {
			continue
		}
		gid, err := strconv.Atoi(fs[2])
		if err != nil || gid == acct.gid || !slices.Contains(strings.Split(fs[3], ","), acct.name) {
			continue
		}
		acct.groups = append(acct.groups, uint32(gid))
	}
	return acct, nil
}

// byUID finds the caller's account; a uid without one is named by number.
func (a accounts) byUID(uid int) account {
	acct, err := a.find(func(_ string, u int) bool { return u == uid })
	if err != nil || acct.name == "" {
		return account{name: "#" + strconv.Itoa(uid), uid: uid, home: "/", shell: "/bin/sh"}
	}
	return acct
}

// plan is what a request runs: decided by the server, from the request,
// who asked (caller) and whom it asks for (target).
type plan struct {
	path string   // the program
	argv []string // with argv[0]
	env  []string
	dir  string
}

// planFor turns a request into the program sudo would run, its
// environment and directory, or a message in sudo's words.
func planFor(r *Request, caller, target account) (plan, error) {
	var p plan
	shell := func() string {
		if r.Shell {
			if s := getenv(r.Env, "SHELL"); s != "" {
				return s
			}
		}
		if target.shell != "" {
			return target.shell
		}
		return "/bin/sh"
	}
	switch {
	case r.Login || r.Shell:
		p.path = shell()
		argv0 := filepath.Base(p.path)
		if r.Login {
			argv0 = "-" + argv0
		}
		p.argv = []string{argv0}
		if len(r.Command) > 0 {
			p.argv = append(p.argv, "-c", shellEscape(r.Command))
		}
	default:
		path, err := lookPath(r.Command[0])
		if err != nil {
			return p, err
		}
		p.path, p.argv = path, slices.Clone(r.Command)
	}
	p.dir = r.Cwd
	if r.Login {
		p.dir = target.home
	}
	if r.Chdir != "" {
		p.dir = r.Chdir
		if !filepath.IsAbs(p.dir) {
			p.dir = filepath.Join(r.Cwd, p.dir)
		}
	}
	if p.dir == "" {
		p.dir = "/"
	}
	p.env = envFor(r, caller, target, strings.Join(append([]string{p.path}, p.argv[1:]...), " "))
	return p, nil
}

// envFor is the command's environment as sudo's env_reset makes it: a
// few of the caller's variables (all of them with -E, the named ones with
// --preserve-env=), the target's identity, secure_path, the SUDO_
// variables naming the caller, and the command line's VAR=value last.
func envFor(r *Request, caller, target account, command string) []string {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range r.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		keep := r.PreserveEnv && !r.Login || slices.Contains(kept, k) || strings.HasPrefix(k, "LC_") || slices.Contains(r.Keep, k)
		if keep {
			set(k, v)
		}
	}
	if !r.PreserveEnv || r.SetHome || r.Login {
		set("HOME", target.home)
	}
	set("SHELL", target.shell)
	set("USER", target.name)
	set("LOGNAME", target.name)
	set("MAIL", "/var/mail/"+target.name)
	set("PATH", securePath)
	set("SUDO_COMMAND", command)
	set("SUDO_USER", caller.name)
	set("SUDO_UID", strconv.Itoa(caller.uid))
	set("SUDO_GID", strconv.Itoa(caller.gid))
	set("SUDO_HOME", caller.home)
	for _, kv := range r.Assign {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out
}

// lookPath finds a command on securePath, as sudo does.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(securePath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("sudo: %s: command not found", name)
}

// shellEscape joins a command for a shell's -c as sudo does with -i and
// -s: every character but letters, digits, '_', '-' and '$' escaped.
func shellEscape(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, c := range a {
			if !(c == '_' || c == '-' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				b.WriteByte('\\')
			}
			b.WriteRune(c)
		}
	}
	return b.String()
}

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
