package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
)

// TestTemplateSteps builds a recipe of ordered steps (user, run, copy,
// env, workdir, symlink, a last user step) with a start command that
// serves HTTP only after 5 seconds and a ready check, then checks from
// sandboxes what each step did, and that the start command's port
// answers at once through the port proxy — on a cold boot (the create
// waits for the check) and from the template snapshot (taken once the
// check passed). No apt or pip step: they reach the Debian mirror and
// PyPI, which TestCustomTemplate covers.
func TestTemplateSteps(t *testing.T) {
	name := "e2e-steps"
	s := startServer(t)
	c := s.createProject("proj_steps")
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	req := api.BuildTemplateRequest{Name: name, Recipe: api.TemplateRecipe{
		Steps: []api.TemplateStep{
			{Env: map[string]string{"STAGE": "one", "E2E_NONCE": hex.EncodeToString(nonce)}},
			{User: "user"},
			{Run: &api.TemplateCommand{Cmd: `echo "$STAGE by $(id -un)" > /home/user/first.txt`}},
			{Copy: []api.TemplateFile{{Path: "/srv/www/index.html", Content: b64("served by the start command"), Owner: "root"}}},
			{Env: map[string]string{"STAGE": "two"}},
			{Workdir: "/srv/app"},
			{Run: &api.TemplateCommand{Cmd: `echo "$STAGE in $(pwd) by $(id -un)" > second.txt`, User: "root"}},
			{Symlink: &api.TemplateSymlink{Target: "/srv/www", Path: "/home/user/www"}},
			{User: "root"},
		},
		Start: "sleep 5; exec python3 -m http.server 8000 --bind 0.0.0.0 --directory /srv/www",
		Ready: "curl -sf -o /dev/null http://127.0.0.1:8000/index.html",
	}}
	tpl, cached, _, err := buildTemplate(t, c, req)
	if err != nil {
		t.Fatalf("building the template: %v\n%s", err, s.logs())
	}
	if cached {
		t.Fatalf("first build was cached; want a fresh build")
	}
	if got, _ := c.Templates().Get(ctx, name); len(got.Recipe.Steps) != 9 || got.Recipe.Ready != req.Recipe.Ready {
		t.Errorf("the template's record = %+v; want its 9 steps and ready check", got.Recipe)
	}

	var ids []string
	check := func(how string) {
		t.Helper()
		begin := time.Now()
		sb := newSandbox(t, c, api.CreateSandboxRequest{Template: name})
		ids = append(ids, sb.SandboxID)
		created := time.Since(begin)
		// At once: a single request, no retry.
		code, body, _ := get(t, c.PortURL(sb.SandboxID, 8000)+"index.html", "Authorization", "Bearer "+s.keys[c])
		if code != http.StatusOK || body != "served by the start command" {
			t.Errorf("%s: GET through port 8000 right after create (%s) = %d %q; want the start command's page", how, created.Round(time.Millisecond), code, body)
		}
		got := execOK(t, c, sb.SandboxID, "sh", "-c", `cat /home/user/first.txt second.txt; pwd; id -un; echo $STAGE; readlink /home/user/www; stat -c %U /srv/www/index.html /home/user/first.txt`)
		want := "one by user\ntwo in /srv/app by root\n/srv/app\nroot\ntwo\n/srv/www\nroot\nuser\n"
		if got != want {
			t.Errorf("%s: the steps' work in the sandbox:\n%s\nwant:\n%s", how, got, want)
		}
		t.Logf("%s: created in %s, its server answering", how, created.Round(time.Millisecond))
	}
	check("cold boot")

	ref := name + "@" + tpl.Key
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(s.logs(), `msg="template snapshot made" template=`+ref) {
		if time.Now().After(deadline) {
			t.Fatalf("no template snapshot of %s within 2 minutes:\n%s", ref, s.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	check("from the template snapshot")

	// The same recipe again: found in the cache.
	again, cached, events, err := buildTemplate(t, c, req)
	if err != nil || !cached || again.Key != tpl.Key || len(events) != 1 {
		t.Errorf("second build = %+v, cached %v, %d events, %v; want the first found in the cache", again, cached, len(events), err)
	}
	for _, id := range ids {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatalf("killing %s: %v", id, err)
		}
	}
	if err := c.Templates().Delete(ctx, name); err != nil {
		t.Fatalf("deleting the template: %v", err)
	}
	if left := cacheEntries(tpl.Key); len(left) > 0 {
		t.Errorf("the deleted template's build is still in the cache: %v", left)
	}
	s.stopAndExpectNothingLeft(t)
}
