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

func TestStatefulJavaScriptContext(t *testing.T) {
	ta := newTestAgent(t, nil)
	var js api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "javascript", Stateful: true}, &js, http.StatusCreated)
	run := func(code string) execution {
		t.Helper()
		return ta.execute(t, api.ExecuteRequest{ContextID: js.ID, Code: code, TimeoutMs: i64(10_000)})
	}
	steps := []struct {
		code, result, stdout, errName string
	}{
		{code: "let x = 1"},
		{code: "x + 1", result: "2"},
		{code: "const a = 20\na * 2 + 2", result: "42"},
		{code: "await Promise.resolve(5)", result: "5"},
		{code: "const b = await Promise.resolve(7)\nb * a", result: "140"},
		{code: "b", result: "7"},
		{code: "console.log('hi', {a})", stdout: "hi { a: 20 }\n"},
		{code: "class ParseError extends Error {}\nthrow new ParseError('bad input')", errName: "ParseError"},
		{code: "x", result: "1"}, // an error keeps the variables
	}
	for _, s := range steps {
		ex := run(s.code)
		var got string
		if len(ex.results) == 1 {
			got = ex.results[0].Data
		}
		var errName string
		if ex.err != nil {
			errName = ex.err.Name
		}
		if got != s.result || ex.stdout != s.stdout || errName != s.errName || !ex.ended || len(ex.results) > 1 {
			t.Errorf("%q: results %+v stdout %q error %+v ended %v; want result %q stdout %q error %q",
				s.code, ex.results, ex.stdout, ex.err, ex.ended, s.result, s.stdout, s.errName)
		}
	}

	// A timeout ends the process; the next call has a new one.
	ex := ta.execute(t, api.ExecuteRequest{ContextID: js.ID, Code: "while (true) {}", TimeoutMs: i64(500)})
	if ex.err == nil || ex.err.Name != ErrNameTimeout {
		t.Fatalf("endless loop: error %+v, want %s", ex.err, ErrNameTimeout)
	}
	if ex := run("typeof x"); len(ex.results) != 1 || ex.results[0].Data != "'undefined'" {
		t.Errorf("after a timeout: results %+v, want a fresh process", ex.results)
	}
	if ex := run("process.exit(3)"); ex.err == nil || ex.err.Name != ErrNameExit || !strings.Contains(ex.err.Message, "ended during the call") {
		t.Errorf("process.exit: error %+v, want %s", ex.err, ErrNameExit)
	}
	if ex := run("1 + 1"); len(ex.results) != 1 || ex.results[0].Data != "2" {
		t.Errorf("after process.exit: results %+v, want 2", ex.results)
	}

	// Killed as root between calls (E2B's suite kills its interpreter so):
	// the next call runs in a new process and is told so, whether or not
	// the agent has seen the death yet (a write to the dead process's
	// pipe, before its exit is reaped, is the call's too).
	for _, wait := range []bool{true, false} {
		run("let kept = 1")
		ta.mu.Lock()
		c := ta.contexts[js.ID]
		ta.mu.Unlock()
		r, _ := c.currentRepl()
		if r == nil {
			t.Fatal("the context has no process after a call")
		}
		if wait {
			syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL)
			<-r.exited
		} else {
			testenv.KillDead(t, r.cmd.Process.Pid)
		}
		ex := run("typeof kept")
		if ex.err != nil || len(ex.results) != 1 || ex.results[0].Data != "'undefined'" || !strings.Contains(ex.stderr, "node process died after the previous call and was restarted") {
			t.Errorf("after a kill between calls (reaped first: %v): results %+v error %+v stderr %q, want 'undefined' in a new process and a note", wait, ex.results, ex.err, ex.stderr)
		}
	}

	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "bash", Stateful: true}, nil, http.StatusBadRequest)
	ta.json(t, "DELETE", "/contexts/"+js.ID, nil, nil, http.StatusNoContent)
}

// TestStatefulDefaultJavaScript: a call with no context and stateful set
// runs in the sandbox's stateful default context of its language (E2B's
// default kernel), made on first use; without it JavaScript runs per call.
func TestStatefulDefaultJavaScript(t *testing.T) {
	ta := newTestAgent(t, nil)
	run := func(code string, stateful bool) execution {
		t.Helper()
		return ta.execute(t, api.ExecuteRequest{Language: "js", Stateful: stateful, Code: code, TimeoutMs: i64(10_000)})
	}
	run("const kept = 41", true)
	if ex := run("kept + 1", true); len(ex.results) != 1 || ex.results[0].Data != "42" {
		t.Errorf("stateful default: results %+v err %+v; want 42", ex.results, ex.err)
	}
	if ex := run("console.log(typeof kept)", false); ex.stdout != "undefined\n" {
		t.Errorf("per-call javascript saw the stateful context's variable: stdout %q", ex.stdout)
	}
	var list api.ContextList
	ta.json(t, "GET", "/contexts", nil, &list, http.StatusOK)
	if got := list.Contexts[len(list.Contexts)-1]; got.ID != "default-javascript-stateful" || got.Language != "javascript" {
		t.Errorf("contexts %+v; want the stateful default listed last", list.Contexts)
	}

	for _, tc := range []struct {
		name  string
		req   any
		path  string
		field string
	}{
		{"stateful bash", api.ExecuteRequest{Language: "bash", Stateful: true, Code: "true"}, "/execute", "stateful"},
		{"stateful with a context", api.ExecuteRequest{ContextID: "default-javascript", Stateful: true, Code: "1"}, "/execute", "stateful"},
		{"typescript per call", api.ExecuteRequest{Language: "ts", Code: "1"}, "/execute", "language"},
		{"typescript context not stateful", api.CreateContextRequest{Language: "typescript"}, "/contexts", "language"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e api.Error
			ta.json(t, "POST", tc.path, tc.req, &e, http.StatusBadRequest)
			if !strings.HasPrefix(e.Message, tc.field+": ") {
				t.Errorf("message %q; want it to name %s", e.Message, tc.field)
			}
		})
	}
	var ts api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "ts", Stateful: true}, &ts, http.StatusCreated)
	if ts.Language != "typescript" {
		t.Errorf("typescript context %+v", ts)
	}
}

// TestStatefulJavaScriptImports: static import statements in a stateful
// context — default, named (renamed too), namespace, side-effect, mixed,
// across lines, indented as E2B's suites send cells, from a builtin or a
// file beside the context's cwd — bind global variables the next calls
// still see, beside top-level await, as E2B's JavaScript kernel takes them.
func TestStatefulJavaScriptImports(t *testing.T) {
	ta := newTestAgent(t, nil)
	if err := os.WriteFile(filepath.Join(ta.home, "mod.mjs"), []byte("export const answer = 42\nexport default 'dflt'\nglobalThis.sideEffect = 'ran'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var js api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "javascript", Stateful: true}, &js, http.StatusCreated)
	steps := []struct {
		code, result, stdout, errName string
	}{
		{code: "\n    import { readFileSync } from 'fs'\n    console.log(typeof readFileSync)\n    ", stdout: "function\n"},
		{code: "typeof readFileSync", result: "'function'"},
		{code: "import path from 'path'", result: ""},
		{code: "import * as os from 'node:os';\nimport { join as j, sep } from \"path\";\nj('a', 'b') === path.join('a', 'b') && typeof os.cpus", result: "'function'"},
		{code: "import util, {\n  inspect,\n  format as f,\n} from 'util'\nf('%s=%d', typeof util.inspect, inspect === util.inspect ? 1 : 0)", result: "'function=1'"},
		{code: "import './mod.mjs'\nsideEffect", result: "'ran'"},
		{code: "  import d, * as m from './mod.mjs'\n  const total = await Promise.resolve(m.answer)\n  `${d} ${total}`", result: "'dflt 42'"},
		{code: "total + 1", result: "43"},
		{code: "const last = await Promise.resolve(total)", result: ""},
		{code: "last", result: "42"},
		{code: "const s = 'import x from \"nothing\"'\ns.length", result: "23"},
		{code: "import { nope } from './missing.mjs'", errName: "Error"},
	}
	for _, s := range steps {
		ex := ta.execute(t, api.ExecuteRequest{ContextID: js.ID, Code: s.code, TimeoutMs: i64(10_000)})
		var got string
		if len(ex.results) == 1 {
			got = ex.results[0].Data
		}
		var errName string
		if ex.err != nil {
			errName = ex.err.Name
		}
		if got != s.result || ex.stdout != s.stdout || errName != s.errName || !ex.ended || len(ex.results) > 1 {
			t.Errorf("%q: results %+v stdout %q error %+v ended %v; want result %q stdout %q error %q",
				s.code, ex.results, ex.stdout, ex.err, ex.ended, s.result, s.stdout, s.errName)
		}
	}
}
