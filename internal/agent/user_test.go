package agent

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
	if ta.user.cred == nil || ta.user.uid != uid {
		t.Fatalf("identity %+v, want to switch to %s", ta.user, name)
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
