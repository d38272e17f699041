package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSettings writes a template settings file and returns its path.
func writeSettings(t *testing.T, s TemplateSettings) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "template.json")
	b, _ := json.Marshal(s)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTemplateReadyCheck: a template's ready check holds /health (a cold
// boot's create) and /ready (its template snapshot) back until it passes.
func TestTemplateReadyCheck(t *testing.T) {
	home := t.TempDir()
	flag := filepath.Join(home, "up")
	cfgPath := writeSettings(t, TemplateSettings{Start: "sleep 0.5; touch " + flag, Ready: "test -f up", Workdir: home})
	begin := time.Now()
	ta := newTestAgent(t, func(c *Config) { c.TemplateConfig = cfgPath; c.Home = home })
	if code, b := ta.do(t, "GET", "/health", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /health before the start command is ready: %d %s, want 503", code, b)
	}
	if code, b := ta.do(t, "GET", "/ready", nil); code != http.StatusNoContent {
		t.Fatalf("GET /ready: %d %s, want 204", code, b)
	}
	if took := time.Since(begin); took < 400*time.Millisecond {
		t.Errorf("/ready answered after %s, before the start command made its file (0.5 s)", took)
	}
	if _, err := os.Stat(flag); err != nil {
		t.Errorf("/ready answered before the ready check could pass: %v", err)
	}
	if code, b := ta.do(t, "GET", "/health", nil); code != http.StatusOK {
		t.Fatalf("GET /health once ready: %d %s, want 200", code, b)
	}
}

// TestTemplateReadyCheckFails: a check that never passes opens /health
// after readyHealthWait (the sandbox is usable) and fails /ready with the
// start command's output (no template snapshot of a broken server).
func TestTemplateReadyCheckFails(t *testing.T) {
	defer func(t1, t2 time.Duration) { readyTimeout, readyHealthWait = t1, t2 }(readyTimeout, readyHealthWait)
	readyTimeout, readyHealthWait = 700*time.Millisecond, 300*time.Millisecond
	os.Remove(startLog)
	cfgPath := writeSettings(t, TemplateSettings{Start: "echo listening-failed", Ready: "false"})
	ta := newTestAgent(t, func(c *Config) { c.TemplateConfig = cfgPath })
	if code, _ := ta.do(t, "GET", "/health", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /health at once: %d, want 503", code)
	}
	time.Sleep(400 * time.Millisecond)
	if code, b := ta.do(t, "GET", "/health", nil); code != http.StatusOK {
		t.Fatalf("GET /health after readyHealthWait: %d %s, want 200", code, b)
	}
	code, b := ta.do(t, "GET", "/ready", nil)
	if code != http.StatusInternalServerError || !strings.Contains(string(b), "did not pass") || !strings.Contains(string(b), "listening-failed") {
		t.Fatalf("GET /ready: %d %s, want 500 naming the check and the start command's output", code, b)
	}
}

// TestTemplateUser: a template's user step names the code's user; a
// sandbox started with another user than the default keeps its own.
func TestTemplateUser(t *testing.T) {
	for _, tt := range []struct{ tmpl, configured, want string }{
		{"root", DefaultUser, "root"}, {"root", "nobody", "nobody"}, {"", DefaultUser, DefaultUser},
	} {
		if got := (TemplateSettings{User: tt.tmpl}).codeUser(tt.configured); got != tt.want {
			t.Errorf("template user %q, configured %q: code's user %q, want %q", tt.tmpl, tt.configured, got, tt.want)
		}
	}
}

// TestTemplatePath: a template's PATH wins over the runtime's default,
// not over a create's own.
func TestTemplatePath(t *testing.T) {
	tmpl := TemplateSettings{Env: map[string]string{"PATH": "/srv/bin:/usr/bin:/bin"}}
	for _, tt := range []struct {
		base []string
		want string
	}{
		{[]string{runtimePath, "A=1"}, "/srv/bin:/usr/bin:/bin"},
		{[]string{"PATH=/create/bin:/bin"}, "/create/bin:/bin"},
	} {
		env := buildEnv(append(tmpl.envList(), tmpl.runtimeEnv(tt.base)...), identity{home: "/home/user"}, "")
		if got := getenv(env, "PATH"); got != tt.want {
			t.Errorf("base %v: PATH %q, want %q", tt.base, got, tt.want)
		}
	}
	if got := (TemplateSettings{}).runtimeEnv([]string{runtimePath}); len(got) != 1 {
		t.Errorf("no template PATH: base %v, want the runtime's kept", got)
	}
}
