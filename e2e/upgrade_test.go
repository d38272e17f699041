package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
)

// TestResumeOtherRunsc: a paused sandbox's image records the runsc build
// that made it. Rewritten to another build (as an upgrade that changed
// runsc leaves it), the resume is refused with a 409 naming the image and
// the way out, and nothing is lost: the sandbox stays paused with its
// image, and with its record put back it resumes with its variable.
func TestResumeOtherRunsc(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_otherrunsc")
	id := newSandbox(t, c, api.CreateSandboxRequest{}).SandboxID
	py(t, c, id, "x = 42")
	ctx := context.Background()
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	image := filepath.Join(s.dataDir, "images", id)
	recPath := filepath.Join(image, "lizard-runtime.json")
	orig, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatalf("the paused sandbox's image has no runtime record: %v", err)
	}
	var rec map[string]any
	if err := json.Unmarshal(orig, &rec); err != nil {
		t.Fatal(err)
	}
	if b, _ := rec["runsc"].(string); !strings.HasPrefix(b, "gvisor-") || rec["lizard"] == nil {
		t.Fatalf("image record %s; want the runsc build (gvisor-...) and Lizard version that made it", orig)
	}
	rec["runsc"], rec["lizard"] = "gvisor-0000000000000000", "0.0.9"
	other, _ := json.Marshal(rec)
	if err := os.WriteFile(recPath, other, 0o600); err != nil {
		t.Fatal(err)
	}

	_, err = c.ResumeSandbox(ctx, id, api.ResumeRequest{})
	if !isStatus(err, 409) {
		t.Fatalf("ResumeSandbox of an image made by another runsc = %v; want 409", err)
	}
	for _, want := range []string{image, "gvisor-0000000000000000", "Lizard 0.0.9", "memory: false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ResumeSandbox's error %q does not name %q", err, want)
		}
	}
	t.Logf("the refused resume: %v", err)
	got, err := c.GetSandbox(ctx, id)
	if err != nil || got.State != api.StatePaused {
		t.Fatalf("after the refused resume: %+v, %v; want paused", got, err)
	}
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		t.Fatalf("after the refused resume the image is gone: %v", err)
	}

	if err := os.WriteFile(recPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox with the record of this runsc: %v", err)
	}
	if got := py(t, c, id, "print(x)"); got != "42" {
		t.Errorf("after the resume x = %q; want 42", got)
	}
}
