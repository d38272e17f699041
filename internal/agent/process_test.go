package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

type processRun struct {
	stdout, stderr string
	end            api.ProcessEvent
}

func (ta *testAgent) process(t *testing.T, req api.ProcessRequest) processRun {
	t.Helper()
	resp := ta.send(t, context.Background(), "POST", "/process", req)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /process: status %d", resp.StatusCode)
	}
	var run processRun
	var out, errOut strings.Builder
	ended := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev api.ProcessEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("decoding %q: %v", sc.Text(), err)
		}
		if ended {
			t.Errorf("event %+v after end", ev)
		}
		switch ev.Type {
		case "stdout":
			out.WriteString(ev.Text)
		case "stderr":
			errOut.WriteString(ev.Text)
		case "end":
			ended, run.end = true, ev
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	if !ended || run.end.ExitCode == nil {
		t.Fatalf("no end event with an exit code (ended %v, %+v)", ended, run.end)
	}
	run.stdout, run.stderr = out.String(), errOut.String()
	return run
}

func TestProcess(t *testing.T) {
	ta := newTestAgent(t, nil)
	tests := []struct {
		name       string
		req        api.ProcessRequest
		stdout     string
		stderrHas  string
		exitCode   int
		errorHas   string
		maxSeconds float64
	}{
		{name: "cmd", req: api.ProcessRequest{Cmd: "echo out; echo err >&2"}, stdout: "out\n", stderrHas: "err"},
		{name: "args run as is", req: api.ProcessRequest{Args: []string{"printf", "%s|", "a b", "$HOME"}}, stdout: "a b|$HOME|"},
		{name: "default cwd is home", req: api.ProcessRequest{Cmd: "pwd"}, stdout: ta.home + "\n"},
		{name: "cwd", req: api.ProcessRequest{Cmd: "pwd", Cwd: "/tmp"}, stdout: "/tmp\n"},
		{name: "envs", req: api.ProcessRequest{Cmd: `echo "$A $SANDBOX_VAR"`, Envs: map[string]string{"A": "x"}}, stdout: "x from-sandbox\n"},
		{name: "envs do not leak", req: api.ProcessRequest{Cmd: `echo "[$A]"`}, stdout: "[]\n"},
		{name: "stdin", req: api.ProcessRequest{Args: []string{"tr", "a-z", "A-Z"}, Stdin: "hello\n"}, stdout: "HELLO\n"},
		{name: "no stdin reads EOF", req: api.ProcessRequest{Cmd: "cat; echo done"}, stdout: "done\n"},
		{name: "exit code", req: api.ProcessRequest{Cmd: "exit 7"}, exitCode: 7},
		{name: "killed by signal", req: api.ProcessRequest{Cmd: "kill -9 $$"}, exitCode: 137},
		{name: "not found", req: api.ProcessRequest{Args: []string{"no-such-program-here"}}, exitCode: ExitCodeNoStart, errorHas: "not found"},
		{name: "timeout", req: api.ProcessRequest{Cmd: "echo started; sleep 30", TimeoutMs: i64(300)}, stdout: "started\n", exitCode: ExitCodeTimeout, errorHas: "timed out after 300ms", maxSeconds: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			run := ta.process(t, tt.req)
			if run.stdout != tt.stdout {
				t.Errorf("stdout %q, want %q", run.stdout, tt.stdout)
			}
			if !strings.Contains(run.stderr, tt.stderrHas) {
				t.Errorf("stderr %q does not contain %q", run.stderr, tt.stderrHas)
			}
			if *run.end.ExitCode != tt.exitCode {
				t.Errorf("exit code %d, want %d", *run.end.ExitCode, tt.exitCode)
			}
			if !strings.Contains(run.end.Error, tt.errorHas) || (tt.errorHas == "" && run.end.Error != "") {
				t.Errorf("error %q, want it to contain %q", run.end.Error, tt.errorHas)
			}
			if took := time.Since(start).Seconds(); tt.maxSeconds > 0 && took > tt.maxSeconds {
				t.Errorf("took %.1fs, want at most %.0fs", took, tt.maxSeconds)
			}
		})
	}
}

func TestProcessBackgroundChildDoesNotHoldTheCall(t *testing.T) {
	ta := newTestAgent(t, nil)
	start := time.Now()
	// The background sleep keeps stdout open; the call must still end soon
	// after the shell exits.
	run := ta.process(t, api.ProcessRequest{Cmd: "sleep 20 & echo $!"})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("call took %v with a background child holding stdout", took)
	}
	if *run.end.ExitCode != 0 {
		t.Errorf("exit code %d, want 0", *run.end.ExitCode)
	}
	ta.process(t, api.ProcessRequest{Cmd: "kill " + strings.TrimSpace(run.stdout)})
}
