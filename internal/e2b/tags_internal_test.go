package e2b

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestTagBounds: a template keeps its newest tags, a project its most
// recently tagged templates, and the tags outlive the store's reopening.
func TestTagBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tags.json")
	ts, err := openTags(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxTagsPerTemplate+5; i++ {
		if err := ts.set("p", "tpl", []string{fmt.Sprintf("t%d", i)}, "b", "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ts.list("p", "tpl")); n != maxTagsPerTemplate {
		t.Errorf("%d tags kept, want %d", n, maxTagsPerTemplate)
	}
	if _, ok := ts.key("p", "tpl", "t0"); ok {
		t.Error("the oldest tag was kept past the bound")
	}
	for i := 0; i < maxTaggedTemplates+3; i++ {
		ts.set("p", fmt.Sprintf("n%d", i), []string{"v1"}, "b", "k")
	}
	if n := len(ts.m["p"]); n != maxTaggedTemplates {
		t.Errorf("%d tagged templates kept, want %d", n, maxTaggedTemplates)
	}
	again, err := openTags(path)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := again.key("p", fmt.Sprintf("n%d", maxTaggedTemplates+2), "v1"); !ok || k != "k" {
		t.Errorf("after reopening: %q %v, want the newest template's tag", k, ok)
	}
}
