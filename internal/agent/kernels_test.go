package agent

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// fakeHarness speaks the harness protocol of R and Java contexts (fd 3
// calls, fd 4 events) over Python's eval, as rkernel.py does over IRkernel:
// results are MIME bundles, SIGINT interrupts a call (KeyboardInterrupt).
const fakeHarness = `
import json, os, sys
ev = os.fdopen(4, "w", buffering=1)
calls = os.fdopen(3)
def send(**m):
    ev.write(json.dumps(m) + "\n")
    ev.flush()
ns = {"print": lambda s: send(t="stdout", text=str(s) + "\n")}
send(t="ready")
for line in calls:
    call = json.loads(line)
    envs = call.get("envs") or {}
    saved = {k: os.environ.get(k) for k in envs}
    os.environ.update(envs)
    try:
        try:
            v = eval(call["code"], ns)
            if v is not None:
                send(t="result", data={"text/plain": repr(v), "text/html": "<b>%s</b>" % v})
        except SyntaxError:
            exec(call["code"], ns)
    except KeyboardInterrupt:
        send(t="error", name="Interrupted", value="", traceback="")
    except Exception as e:
        send(t="error", name=type(e).__name__, value=str(e), traceback="Traceback: " + str(e))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    send(t="done")
`

// TestKernelContexts checks the runner of R and Java contexts
// (kernels.go) with a fake harness: state kept, bundles, per-call envs, a
// timeout that interrupts and keeps the state, one that cannot interrupt
// (killed after the grace), a kernel that dies during a call and one
// killed between calls.
func TestKernelContexts(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 (make deps) is needed: %v", err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "R"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ta := newTestAgent(t, func(c *Config) {
		c.Python = python
		c.Env = []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "SANDBOX_VAR=from-sandbox"}
	})
	ta.rKernel = filepath.Join(t.TempDir(), "fake.py")
	if err := os.WriteFile(ta.rKernel, []byte(fakeHarness), 0o644); err != nil {
		t.Fatal(err)
	}
	var cx api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "r"}, &cx, http.StatusCreated)
	run := func(req api.ExecuteRequest) execution {
		t.Helper()
		if req.ContextID == "" && req.Language == "" {
			req.ContextID = cx.ID
		}
		if req.TimeoutMs == nil {
			req.TimeoutMs = i64(20_000)
		}
		return ta.execute(t, req)
	}
	code := func(c string) execution { return run(api.ExecuteRequest{Code: c}) }

	if ex := code("x = 41"); ex.err != nil || !ex.ended {
		t.Fatalf("x = 41: %+v", ex)
	}
	ex := run(api.ExecuteRequest{Code: "x + 1", Bundle: true})
	if len(ex.results) != 1 || ex.results[0].Mime != "text/html" || ex.results[0].Data != "<b>42</b>" || ex.results[0].Type != api.ResultTypeResult {
		t.Errorf("x + 1: results %+v, want one text/html result <b>42</b>", ex.results)
	}
	for _, e := range ex.events {
		if e.Type == api.EventResult && len(e.Bundle) != 2 {
			t.Errorf("x + 1 with bundle: bundle %v, want text/plain and text/html", e.Bundle)
		}
	}
	if ex := code("print('hi')"); ex.stdout != "hi\n" {
		t.Errorf("print: stdout %q", ex.stdout)
	}
	if ex := code("1/0"); ex.err == nil || ex.err.Name != "ZeroDivisionError" || ex.err.Traceback == "" {
		t.Errorf("1/0: error %+v, want ZeroDivisionError with its traceback", ex.err)
	}
	if ex := run(api.ExecuteRequest{Code: "__import__('os').environ.get('FOO', '') + __import__('os').environ['SANDBOX_VAR']", Envs: map[string]string{"FOO": "bar"}}); len(ex.results) != 1 || ex.results[0].Data != "<b>barfrom-sandbox</b>" {
		t.Errorf("per-call envs: results %+v", ex.results)
	}

	// A timeout interrupts the call; the state stays.
	ex = run(api.ExecuteRequest{Code: "__import__('time').sleep(30)", TimeoutMs: i64(300)})
	if ex.err == nil || ex.err.Name != ErrNameTimeout || !strings.Contains(ex.err.Message, "keeps its variables") || !ex.ended {
		t.Errorf("sleep past the timeout: error %+v ended %v, want TimeoutError keeping the variables", ex.err, ex.ended)
	}
	if ex := code("x"); len(ex.results) != 1 || ex.results[0].Data != "<b>41</b>" {
		t.Errorf("x after the timeout: %+v %+v, want 41 kept", ex.results, ex.err)
	}

	// A call that ignores the interrupt is killed after the grace.
	start := time.Now()
	ex = run(api.ExecuteRequest{Code: "(__import__('signal').signal(2, 1), __import__('time').sleep(60))", TimeoutMs: i64(300)})
	if ex.err == nil || ex.err.Name != ErrNameTimeout || !strings.Contains(ex.err.Message, "was killed") {
		t.Errorf("uninterruptible call: error %+v, want TimeoutError saying the kernel was killed", ex.err)
	}
	if took := time.Since(start); took < kernelInterruptGrace || took > kernelInterruptGrace+10*time.Second {
		t.Errorf("uninterruptible call ended after %v, want the grace %v and a little", took, kernelInterruptGrace)
	}
	if ex := code("x"); ex.err == nil || ex.err.Name != "NameError" {
		t.Errorf("x after the kill: %+v %+v, want NameError from a new kernel", ex.results, ex.err)
	}

	// A kernel that dies during a call.
	code("x = 1")
	ex = code("__import__('os')._exit(3)")
	if ex.err == nil || ex.err.Name != api.ErrorNameKernelDied || !strings.Contains(ex.err.Message, "exit status 3") || !ex.ended {
		t.Errorf("os._exit(3): error %+v, want %s saying exit status 3", ex.err, api.ErrorNameKernelDied)
	}
	// One killed between calls: the next call runs in a new one, told so.
	code("x = 1")
	ta.mu.Lock()
	c := ta.contexts[cx.ID]
	ta.mu.Unlock()
	r, _ := c.currentRepl()
	if r == nil {
		t.Fatal("the context has no process after a call")
	}
	syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.exited
	ex = code("6 * 7")
	if len(ex.results) != 1 || ex.results[0].Data != "<b>42</b>" || !strings.Contains(ex.stderr, "died after the previous call") {
		t.Errorf("after a kill between calls: results %+v stderr %q, want 42 and a note", ex.results, ex.stderr)
	}

	// A restart starts a new kernel, without the variables.
	code("z = 5")
	if status, body := ta.do(t, "POST", "/contexts/"+cx.ID+"/restart", nil); status != http.StatusOK {
		t.Errorf("restart: %d %s", status, body)
	}
	if ex := code("z"); ex.err == nil || ex.err.Name != "NameError" {
		t.Errorf("z after a restart: %+v %+v, want NameError", ex.results, ex.err)
	}

	// Deleting the context ends its process.
	r, _ = c.currentRepl()
	if status, _ := ta.do(t, "DELETE", "/contexts/"+cx.ID, nil); status != http.StatusNoContent {
		t.Errorf("DELETE: %d", status)
	}
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		t.Error("the context's process outlived the context")
	}

	// The default R context is made on first use; stateful asks nothing more.
	if ex := run(api.ExecuteRequest{Language: "r", Code: "y = 2", Stateful: true}); ex.err != nil {
		t.Errorf("default r context: %+v", ex.err)
	}
	if ex := run(api.ExecuteRequest{Language: "r", Code: "y"}); len(ex.results) != 1 || ex.results[0].Data != "<b>2</b>" {
		t.Errorf("default r context keeps y: %+v %+v", ex.results, ex.err)
	}
}

// TestKernelLanguages: r and java are languages of contexts and runs; a
// template without them says what is missing.
func TestKernelLanguages(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.Env = []string{"PATH=" + t.TempDir()} })
	for _, lang := range []string{"r", "java"} {
		var cx api.Context
		ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: lang, Stateful: true}, &cx, http.StatusCreated)
		if cx.Language != lang {
			t.Errorf("context language %q, want %q", cx.Language, lang)
		}
		ex := ta.execute(t, api.ExecuteRequest{Language: lang, Code: "1"})
		if ex.err == nil || ex.err.Name != ErrNameStart || !strings.Contains(ex.err.Message, "interpreter template") {
			t.Errorf("%s without its kernel: error %+v, want %s naming the interpreter template", lang, ex.err, ErrNameStart)
		}
	}
	code, body := ta.do(t, "POST", "/execute", api.ExecuteRequest{Language: "cobol", Code: "1"})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "r or java") {
		t.Errorf("unknown language: %d %s, want 400 listing r and java", code, body)
	}
}
