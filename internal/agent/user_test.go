package agent

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestRunsCodeAsUser checks that, run by root, the agent runs code as the
// configured user and gives it the files it creates.
func TestRunsCodeAsUser(t *testing.T) {
	testenv.RequiresRoot(t)
	const name, uid = "nobody", 65534
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} { // let the user reach its home
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(root, "home", name)
	ta := newTestAgent(t, func(c *Config) {
		c.User = name
		c.Home = home
	})
	if ta.launch.user.cred == nil || ta.launch.user.uid != uid {
		t.Fatalf("identity %+v, want to switch to %s", ta.launch.user, name)
	}
	owner := func(p string) int {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid)
	}
	if got := owner(home); got != uid {
		t.Errorf("home owned by %d, want %d", got, uid)
	}

	ex := ta.execute(t, api.ExecuteRequest{Language: "bash", Code: `echo "$(id -u) $USER $HOME"; touch made-by-code`})
	if ex.err != nil {
		t.Fatalf("bash as %s: %+v", name, *ex.err)
	}
	if want := "65534 nobody " + home + "\n"; ex.stdout != want {
		t.Errorf("bash: stdout %q, want %q", ex.stdout, want)
	}
	if got := owner(filepath.Join(home, "made-by-code")); got != uid {
		t.Errorf("file made by code owned by %d, want %d", got, uid)
	}
	ex = ta.execute(t, api.ExecuteRequest{Language: "js", Code: "console.log(process.getuid()); throw new TypeError('as user')"})
	if ex.stdout != "65534\n" || ex.err == nil || ex.err.Name != "TypeError" {
		t.Errorf("js: stdout %q error %+v, want 65534 and TypeError", ex.stdout, ex.err)
	}
	run := ta.process(t, api.ProcessRequest{Args: []string{"id", "-un"}})
	if strings.TrimSpace(run.stdout) != name {
		t.Errorf("process runs as %q, want %s", run.stdout, name)
	}

	// A working directory the user cannot enter is refused when the
	// context is made (issue 11), not at its first call.
	private := filepath.Join(root, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"python", "bash"} {
		var e api.Error
		ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: lang, Cwd: private}, &e, http.StatusBadRequest)
		if !strings.Contains(e.Message, "cannot enter") {
			t.Errorf("%s context in %s: error %q, want it to say the user cannot enter it", lang, private, e.Message)
		}
	}

	ta.json(t, "PUT", "/files?path=up/load.txt", "data", nil, http.StatusOK)
	ta.json(t, "POST", "/files/mkdir?path=made/dir", nil, nil, http.StatusOK)
	for _, p := range []string{"up", "up/load.txt", "made", "made/dir"} {
		if got := owner(filepath.Join(home, p)); got != uid {
			t.Errorf("%s owned by %d, want %d", p, got, uid)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(Config) bool
		wantErr bool
	}{
		{"defaults", nil, nil, func(c Config) bool {
			return c.Listen == "0.0.0.0:49983" && c.Python == DefaultPython && c.User == "user" && c.Node == "node" && c.MaxOutputBytes == DefaultMaxOutputBytes
		}, false},
		{"flags", []string{"--listen", "127.0.0.1:1", "--user", "", "--home", "/h", "--max-output", "100"}, nil, func(c Config) bool {
			return c.Listen == "127.0.0.1:1" && c.User == "" && c.Home == "/h" && c.MaxOutputBytes == 100
		}, false},
		{"env", nil, map[string]string{"LIZARD_AGENT_LISTEN": "127.0.0.1:2", "LIZARD_AGENT_PYTHON": "/p"}, func(c Config) bool {
			return c.Listen == "127.0.0.1:2" && c.Python == "/p"
		}, false},
		{"flag beats env", []string{"--listen", "127.0.0.1:3"}, map[string]string{"LIZARD_AGENT_LISTEN": "127.0.0.1:2"}, func(c Config) bool {
			return c.Listen == "127.0.0.1:3"
		}, false},
		{"bad listen", []string{"--listen", "nope"}, nil, nil, true},
		{"unknown flag", []string{"--nope"}, nil, nil, true},
		{"stray argument", []string{"extra"}, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfig(tt.args, func(k string) string { return tt.env[k] })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && !tt.check(cfg) {
				t.Errorf("config %+v is not what the flags and env say", cfg)
			}
		})
	}
}

func TestCanEnter(t *testing.T) {
	testenv.RequiresRoot(t) // directories owned by someone else
	nobody := identity{name: "nobody", uid: 65534, gid: 65534, cred: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4242}}}
	base, err := os.MkdirTemp("", "canenter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := mk("private", 0o700, 0, 0)
	tests := []struct {
		name string
		dir  string
		ok   bool
	}{
		{"others may search", mk("open", 0o711, 0, 0), true},
		{"root's private dir", private, false},
		{"below a private dir", mk("private/inner", 0o777, 65534, 65534), false},
		{"own private dir", mk("mine", 0o700, 65534, 65534), true},
		{"group may search", mk("group", 0o710, 0, 4242), true},
		{"group may not", mk("nogroup", 0o701, 0, 4242), false},
		{"owner bit wins over others", mk("ownerdeny", 0o601, 65534, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := nobody.canEnter(tt.dir)
			if (err == nil) != tt.ok {
				t.Errorf("canEnter(%s) = %v, want ok %v", tt.dir, err, tt.ok)
			}
			if err != nil && !errors.Is(err, os.ErrPermission) {
				t.Errorf("canEnter(%s) = %v, want a permission error", tt.dir, err)
			}
		})
	}
	root := identity{uid: 0, cred: &syscall.Credential{}}
	if err := root.canEnter(private); err != nil {
		t.Errorf("root canEnter(%s) = %v, want nil", private, err)
	}
}

// TestFilesActAsUser: run by root, the agent acts on files as the user a
// call names — the sandbox user by default, root when asked — for every
// file call, so a file call cannot do what the user could not (issue 33:
// an upload wrote under /etc and gave the file to the user). Nothing of
// the user's credentials is left on the agent's own threads.
func TestFilesActAsUser(t *testing.T) {
	testenv.RequiresRoot(t)
	const name, uid = "nobody", 65534
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(root, "home", name)
	ta := newTestAgent(t, func(c *Config) {
		c.User = name
		c.Home = home
	})
	// etc stands for /etc: root's, others may read it; private for a 0700 directory.
	etc, private := filepath.Join(root, "etc"), filepath.Join(root, "private")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0"), 0o644); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) int {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid)
	}
	q := func(p string, more ...string) string {
		s := "path=" + p
		for i := 0; i+1 < len(more); i += 2 {
			s += "&" + more[i] + "=" + more[i+1]
		}
		return s
	}
	denied := []struct {
		name, method, path string
		body               any
	}{
		{"write", "PUT", "/files?" + q(etc+"/x"), "owned"},
		{"write over", "PUT", "/files?" + q(etc+"/passwd"), "owned"},
		{"write below", "PUT", "/files?" + q(etc+"/new/x"), "owned"},
		{"read", "GET", "/files?" + q(private+"/secret"), nil},
		{"list", "GET", "/files/list?" + q(private), nil},
		{"stat", "GET", "/files/stat?" + q(private+"/secret"), nil},
		{"mkdir", "POST", "/files/mkdir?" + q(etc+"/d"), nil},
		{"rename", "POST", "/files/rename?" + q(etc+"/passwd", "to", home+"/passwd"), nil},
		{"rename into", "POST", "/files/rename?" + q(home, "to", etc+"/home"), nil},
		{"watch", "GET", "/files/watch?" + q(private), nil},
		{"remove", "DELETE", "/files?" + q(etc+"/passwd"), nil},
	}
	for _, tt := range denied {
		t.Run("user/"+tt.name, func(t *testing.T) {
			status, body := ta.do(t, tt.method, tt.path, tt.body)
			if status != http.StatusBadRequest || !strings.Contains(string(body), "permission denied") || !strings.Contains(string(body), `\"root\"`) {
				t.Errorf("%s %s as the sandbox user: %d %s; want 400 saying permission denied and how to ask for root", tt.method, tt.path, status, body)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(etc, "passwd")); string(b) != "root:x:0:0" {
		t.Errorf("etc/passwd is %q after the refused calls, want it unchanged", b)
	}
	if ents, _ := os.ReadDir(etc); len(ents) != 1 {
		t.Errorf("etc holds %v after the refused calls, want passwd alone (no temporary file)", ents)
	}
	for _, tt := range denied {
		t.Run("root/"+tt.name, func(t *testing.T) {
			if tt.name == "watch" {
				resp := ta.send(t, t.Context(), tt.method, tt.path+"&user=root", nil)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("watch as root: %d, want 200", resp.StatusCode)
				}
				return
			}
			status, body := ta.do(t, tt.method, tt.path+"&user=root", tt.body)
			if status/100 != 2 {
				t.Errorf("%s %s as root: %d %s; want it done", tt.method, tt.path, status, body)
			}
			if tt.name == "rename" {
				// Put it back for "rename into" and the checks below.
				ta.do(t, "POST", "/files/rename?"+q(home+"/passwd", "to", etc+"/passwd", "user", "root"), nil)
			}
		})
	}
	if _, err := os.Lstat(etc + "/passwd"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etc/passwd after a remove as root: %v, want it gone", err)
	}
	if got := owner(etc + "/x"); got != 0 {
		t.Errorf("a file written as root is owned by %d, want 0", got)
	}
	ta.json(t, "PUT", "/files?path=mine/f.txt", "mine", nil, http.StatusOK)
	for _, p := range []string{"mine", "mine/f.txt"} {
		if got := owner(filepath.Join(home, p)); got != uid {
			t.Errorf("%s written as the sandbox user is owned by %d, want %d", p, got, uid)
		}
	}
	ta.json(t, "PUT", "/files?path=mine/f.txt&user="+name, "again", nil, http.StatusOK)
	if status, body := ta.do(t, "GET", "/files/stat?path=x&user=mallory", nil); status != http.StatusBadRequest || !strings.Contains(string(body), "user") {
		t.Errorf("an unknown user: %d %s; want 400 naming user", status, body)
	}

	// The agent's own threads stay root: calls as the user in parallel,
	// then files made by many goroutines at once are all root's.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ta.do(t, "PUT", "/files?path=par/"+strconv.Itoa(i), "x")
			ta.do(t, "GET", "/files/list?path=par", nil)
		}()
	}
	wg.Wait()
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.Gosched()
			p := filepath.Join(root, "agent-"+strconv.Itoa(i))
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Errorf("the agent's own write: %v", err)
				return
			}
			if got := owner(p); got != 0 {
				t.Errorf("a file the agent made is owned by %d, want 0: a thread kept a file call's user", got)
			}
		}()
	}
	wg.Wait()
}

// TestRootContext: a context made with user "root" (E2B's surface makes
// its contexts so, as E2B's interpreter runs its kernels) runs its calls as
// root with root's HOME, in a directory the sandbox user cannot enter; the
// sandbox user's contexts are refused it as before, and another user is a
// 400 naming the field.
func TestRootContext(t *testing.T) {
	testenv.RequiresRoot(t)
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ta := newTestAgent(t, func(c *Config) {
		c.User = "nobody"
		c.Home = filepath.Join(root, "home", "nobody")
	})
	private := filepath.Join(root, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	var e api.Error
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "bash", Cwd: private}, &e, http.StatusBadRequest)
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "bash", User: "mallory"}, &e, http.StatusBadRequest)
	if !strings.HasPrefix(e.Message, "user: ") {
		t.Errorf("unknown user: message %q, want it to name user", e.Message)
	}
	for _, tc := range []struct{ lang, code, want string }{
		{"bash", `echo "$(id -u) $HOME $(pwd)"`, "0 /root " + private + "\n"},
		{"javascript", "console.log(process.getuid(), process.env.HOME, process.cwd())", "0 /root " + private + "\n"},
	} {
		for _, stateful := range []bool{false, true} {
			if stateful && tc.lang == "bash" {
				continue
			}
			var c api.Context
			ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: tc.lang, Cwd: private, User: "root", Stateful: stateful}, &c, http.StatusCreated)
			ex := ta.execute(t, api.ExecuteRequest{ContextID: c.ID, Code: tc.code, TimeoutMs: i64(10_000)})
			if ex.stdout != tc.want || ex.err != nil {
				t.Errorf("%s (stateful %v) as root: stdout %q error %+v, want %q", tc.lang, stateful, ex.stdout, ex.err, tc.want)
			}
		}
	}
	// A Python context's kernel starts as root, with root's HOME.
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Cwd: private, User: "root"}, nil, http.StatusCreated)
	ks := ta.kernels.list()
	if cfg := ks[len(ks)-1].cfg; cfg.Credential != nil || cfg.Cwd != private || !slices.Contains(cfg.Env, "HOME=/root") {
		t.Errorf("root python kernel: credential %+v cwd %s env %v; want none, %s, HOME=/root", cfg.Credential, cfg.Cwd, cfg.Env, private)
	}
	// The sandbox user's calls are still the user's.
	if ex := ta.execute(t, api.ExecuteRequest{Language: "bash", Code: "id -u"}); ex.stdout != "65534\n" {
		t.Errorf("default bash after root contexts: stdout %q, want 65534", ex.stdout)
	}
}
