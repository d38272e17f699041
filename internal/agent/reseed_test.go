package agent

import (
	"net/http"
	"testing"

	"github.com/lizard-build/lizard/api"
)

// TestReseedEnvs checks that /reseed's envs reach every process and kernel
// started afterwards, and that unset removes variables.
func TestReseedEnvs(t *testing.T) {
	ta := newTestAgent(t, nil)
	ta.defaultKernel(t) // started before the reseed
	body := map[string]any{"sandboxId": "newid", "envs": map[string]string{"NEW_VAR": "new"}, "unset": []string{"SANDBOX_VAR"}}
	if code, b := ta.do(t, "POST", "/reseed", body); code != http.StatusNoContent {
		t.Fatalf("POST /reseed: status %d, body %s; want 204", code, b)
	}
	ex := ta.execute(t, api.ExecuteRequest{Language: "bash", Code: `echo "$NEW_VAR|$LIZARD_SANDBOX_ID|${SANDBOX_VAR-unset}"`})
	if want := "new|newid|unset\n"; ex.stdout != want {
		t.Errorf("bash after /reseed: stdout %q, want %q", ex.stdout, want)
	}
	var ctx api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "python"}, &ctx, http.StatusCreated)
	ks := ta.kernels.list()
	last := ks[len(ks)-1]
	if got := getenv(last.cfg.Env, "NEW_VAR"); got != "new" {
		t.Errorf("kernel started after /reseed: NEW_VAR = %q, want new", got)
	}
	if got := getenv(last.cfg.Env, "SANDBOX_VAR"); got != "" {
		t.Errorf("kernel started after /reseed: SANDBOX_VAR = %q, want it unset", got)
	}
}

func TestReady(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.Preload = []string{"numpy"} })
	if code, b := ta.do(t, "GET", "/ready", nil); code != http.StatusNoContent {
		t.Fatalf("GET /ready: status %d, body %s; want 204", code, b)
	}
}

func TestLoadConfigPreload(t *testing.T) {
	cfg, err := LoadConfig(nil, func(k string) string {
		if k == "LIZARD_AGENT_PRELOAD" {
			return "numpy, pandas,,matplotlib.pyplot"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Preload; len(got) != 3 || got[0] != "numpy" || got[2] != "matplotlib.pyplot" {
		t.Errorf("Preload = %q, want [numpy pandas matplotlib.pyplot]", got)
	}
}
