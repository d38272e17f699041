package agent

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestContextsLifecycle(t *testing.T) {
	ta := newTestAgent(t, nil)
	var list api.ContextList
	ta.json(t, "GET", "/contexts", nil, &list, http.StatusOK)
	wantDefaults := []api.Context{
		{ID: "default-python", Language: "python", Cwd: ta.home},
		{ID: "default-javascript", Language: "javascript", Cwd: ta.home},
		{ID: "default-bash", Language: "bash", Cwd: ta.home},
	}
	if len(list.Contexts) != 3 {
		t.Fatalf("contexts = %+v, want the three defaults", list.Contexts)
	}
	for i, want := range wantDefaults {
		if list.Contexts[i] != want {
			t.Errorf("contexts[%d] = %+v, want %+v", i, list.Contexts[i], want)
		}
	}

	dir := filepath.Join(ta.home, "proj")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var py, sh api.Context
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Cwd: dir}, &py, http.StatusCreated)
	ta.json(t, "POST", "/contexts", api.CreateContextRequest{Language: "sh"}, &sh, http.StatusCreated)
	if py.Language != "python" || py.Cwd != dir || sh.Language != "bash" || sh.Cwd != ta.home || py.ID == sh.ID {
		t.Errorf("created %+v and %+v", py, sh)
	}
	ks := ta.kernels.list()
	k := ks[len(ks)-1]
	if k.cfg.Cwd != dir {
		t.Errorf("new context's kernel runs in %q, want %q", k.cfg.Cwd, dir)
	}
	ex := ta.execute(t, api.ExecuteRequest{ContextID: py.ID, Code: "os.getcwd()"})
	if len(ex.results) != 1 || ex.results[0].Data != "'"+dir+"'" {
		t.Errorf("execute in context went to %+v, want its own kernel", ex.results)
	}

	ta.json(t, "GET", "/contexts", nil, &list, http.StatusOK)
	if n := len(list.Contexts); n != 5 || list.Contexts[3].ID != py.ID || list.Contexts[4].ID != sh.ID {
		t.Errorf("contexts = %+v, want defaults then %s, %s", list.Contexts, py.ID, sh.ID)
	}

	var restarted api.Context
	ta.json(t, "POST", "/contexts/"+py.ID+"/restart", nil, &restarted, http.StatusOK)
	ta.json(t, "POST", "/contexts/"+sh.ID+"/restart", nil, nil, http.StatusOK)
	ta.json(t, "POST", "/contexts/default-python/restart", nil, nil, http.StatusOK)
	k.mu.Lock()
	restarts := k.restarts
	k.mu.Unlock()
	if restarted != py || restarts != 1 {
		t.Errorf("restart answered %+v with %d kernel restarts, want %+v and 1", restarted, restarts, py)
	}

	for _, c := range []api.Context{py, sh} {
		if status, b := ta.do(t, "DELETE", "/contexts/"+c.ID, nil); status != http.StatusNoContent {
			t.Errorf("DELETE %s: status %d %s, want 204", c.ID, status, b)
		}
		if status, _ := ta.do(t, "POST", "/execute", api.ExecuteRequest{ContextID: c.ID, Code: "1"}); status != http.StatusNotFound {
			t.Errorf("execute in deleted %s: status %d, want 404", c.ID, status)
		}
	}
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if !closed {
		t.Errorf("deleting the context left its kernel running")
	}
	ta.json(t, "GET", "/contexts", nil, &list, http.StatusOK)
	if len(list.Contexts) != 3 {
		t.Errorf("after deletes: %+v, want the defaults", list.Contexts)
	}
}
