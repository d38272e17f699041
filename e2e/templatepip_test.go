package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

// wheel makes a pure-Python wheel of package name (its module sets VALUE).
func wheel(t *testing.T, name, version, value string) (string, []byte) {
	t.Helper()
	mod := strings.ReplaceAll(name, "-", "_")
	dist := fmt.Sprintf("%s-%s.dist-info", mod, version)
	files := map[string]string{
		mod + "/__init__.py": "VALUE = " + value + "\n",
		dist + "/METADATA":   fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version),
		dist + "/WHEEL":      "Wheel-Version: 1.0\nGenerator: lizard-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	var record strings.Builder
	for _, p := range []string{mod + "/__init__.py", dist + "/METADATA", dist + "/WHEEL"} {
		w, _ := z.Create(p)
		w.Write([]byte(files[p]))
		sum := sha256.Sum256([]byte(files[p]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[p]))
	}
	record.WriteString(dist + "/RECORD,,\n")
	w, _ := z.Create(dist + "/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s-%s-py3-none-any.whl", mod, version), buf.Bytes()
}

// TestTemplatePipStep builds a recipe whose pip step sits between run
// steps, its wheel fetched on the host from a package index on loopback
// (PIP_INDEX_URL: no packet leaves the machine): the run step before it
// does not see the package, the one after does, and so does a sandbox.
func TestTemplatePipStep(t *testing.T) {
	file, whl := wheel(t, "lizard-e2e-pkg", "1.0", "42")
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/lizard-e2e-pkg/":
			fmt.Fprintf(w, `<html><body><a href="/files/%s">%s</a></body></html>`, file, file)
		case "/files/" + file:
			w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	}))
	defer index.Close()
	t.Setenv("PIP_INDEX_URL", index.URL+"/simple/")
	name := "e2e-pip-step"
	s := startServer(t)
	c := s.createProject("proj_pipstep")
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	const py = "/opt/lizard/venv/bin/python"
	req := api.BuildTemplateRequest{Name: name, Recipe: api.TemplateRecipe{Steps: []api.TemplateStep{
		{Env: map[string]string{"E2E_NONCE": hex.EncodeToString(nonce)}},
		{Run: &api.TemplateCommand{Cmd: "! " + py + " -c 'import lizard_e2e_pkg' 2>/dev/null && echo not-yet > /home/user/before.txt"}},
		{Pip: []string{"lizard-e2e-pkg==1.0"}},
		{Run: &api.TemplateCommand{Cmd: py + " -c 'import lizard_e2e_pkg; print(lizard_e2e_pkg.VALUE)' > /home/user/after.txt"}},
	}}}
	tpl, _, events, err := buildTemplate(t, c, req)
	if err != nil {
		t.Fatalf("building the template: %v\n%+v\n%s", err, events, s.logs())
	}
	t.Cleanup(func() { c.Templates().Delete(context.Background(), name) })
	var names []string
	for _, ev := range events {
		if ev.Type == api.BuildEventStep {
			names = append(names, ev.Name)
		}
	}
	if want := "installing pip packages: lizard-e2e-pkg==1.0"; len(names) < 7 || names[5] != want {
		t.Errorf("build steps %q; want the pip step 6th (fetch, copy, boot, env, run, pip, run, finishing)", names)
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{Template: name})
	if got := execOK(t, c, sb.SandboxID, "sh", "-c", "cat /home/user/before.txt /home/user/after.txt; "+py+" -c 'import lizard_e2e_pkg; print(lizard_e2e_pkg.VALUE)'"); got != "not-yet\n42\n42\n" {
		t.Errorf("the steps' work = %q; want not-yet (before the pip step), then 42 (after it, and in the sandbox)", got)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.Templates().Delete(ctx, name); err != nil {
		t.Fatalf("deleting the template: %v", err)
	}
	if left := cacheEntries(tpl.Key); len(left) > 0 {
		t.Errorf("the deleted template's build is still in the cache: %v", left)
	}
	s.stopAndExpectNothingLeft(t)
}
