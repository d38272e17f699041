package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/template"
)

// TestTemplateQuotas: with --max-templates-per-project 1 and
// --max-template-disk-per-project-mb 1800, a project's second template is
// a 429 before anything is built, saying what to delete or raise; a
// rebuild of its one template that writes past the 1,800 MiB (the
// interpreter's copy is about 1,350) is stopped while it runs, says why,
// and leaves nothing of itself in the cache, the template still served
// by its earlier build.
func TestTemplateQuotas(t *testing.T) {
	s := startServer(t, "--max-templates-per-project", "1", "--max-template-disk-per-project-mb", "1800")
	const project = "proj_tplquota"
	c := s.createProject(project)
	ctx := context.Background()
	nonce := make([]byte, 6)
	rand.Read(nonce)
	env := map[string]string{"E2E_NONCE": hex.EncodeToString(nonce)}

	first, _, _, err := buildTemplate(t, c, api.BuildTemplateRequest{Name: "quota-a", Recipe: api.TemplateRecipe{Env: env,
		Run: []api.TemplateCommand{{Cmd: "echo one > /home/user/one.txt"}}}})
	if err != nil {
		t.Fatalf("building the project's first template: %v\n%s", err, s.logs())
	}
	t.Logf("first template: %d MiB in %d ms", first.SizeBytes>>20, first.BuildMs)

	var apiErr *client.Error
	begin := time.Now()
	second := api.BuildTemplateRequest{Name: "quota-b", Recipe: api.TemplateRecipe{Env: env, Run: []api.TemplateCommand{{Cmd: "true"}}}}
	_, _, events, err := buildTemplate(t, c, second)
	if !errors.As(err, &apiErr) || apiErr.Status != 429 || !strings.Contains(apiErr.Message, "has 1 custom templates (builds under way included), its maximum: delete one first") ||
		!strings.Contains(apiErr.Message, "--max-templates-per-project") {
		t.Fatalf("building a second template = %v; want a 429 saying to delete one or raise the quota", err)
	}
	if len(events) != 0 {
		t.Errorf("the refused build streamed %d events in %s; want a refusal before it starts", len(events), time.Since(begin))
	}

	base, err := template.Ensure(ctx, cacheDir(), template.Default, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(r api.TemplateRecipe) string {
		if err := recipe.Validate(&r, template.Names()); err != nil {
			t.Fatal(err)
		}
		return recipe.Key(project, r, filepath.Base(filepath.Dir(base)))
	}
	if left := cacheEntries(keyOf(second.Recipe)); len(left) > 0 {
		t.Errorf("the refused build left in the cache: %v", left)
	}

	// Its rebuild may use the 1,800 MiB (its own earlier build is not
	// counted), and writes 700 MiB more than the copy's 1,350.
	grow := api.TemplateRecipe{Env: env, Run: []api.TemplateCommand{{Cmd: "head -c 700M /dev/zero > /big && sleep 30"}}}
	begin = time.Now()
	_, _, _, err = buildTemplate(t, c, api.BuildTemplateRequest{Name: "quota-a", Recipe: grow})
	var be *client.BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Message, "its project's template quota leaves it (--max-template-disk-per-project-mb)") {
		t.Fatalf("a rebuild growing past the quota = %v; want it stopped, naming the quota\n%s", err, s.logs())
	}
	t.Logf("the growing build was stopped after %s: %s", time.Since(begin).Round(time.Millisecond), be.Message)
	if left := cacheEntries(keyOf(grow)); len(left) > 0 {
		t.Errorf("the stopped build left in the cache: %v", left)
	}
	if got, err := c.Templates().Get(ctx, "quota-a"); err != nil || got.Key != first.Key {
		t.Errorf("quota-a after the stopped rebuild = %+v, %v; want its first build %s", got, err, first.Key)
	}
	if err := c.Templates().Delete(ctx, "quota-a"); err != nil {
		t.Fatal(err)
	}
	if left := cacheEntries(first.Key); len(left) > 0 {
		t.Errorf("the deleted template's build is still in the cache: %v", left)
	}
	s.stopAndExpectNothingLeft(t)
}
