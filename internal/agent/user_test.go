package agent

import (
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
