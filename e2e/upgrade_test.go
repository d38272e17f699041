package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestResumeKeptRunsc: an image made by another runsc build — a real second
// binary, runsc with bytes appended (another hash, the same code) — is
// restored by that build, kept in the data directory since the server ran
// it, after the server was switched to the other runsc and the first
// binary deleted (an upgrade): the resume brings the Python variable back,
// and the sandbox stays that build's, whose Sentry wrote its memory, so its
// next image names that build again.
func TestResumeKeptRunsc(t *testing.T) {
	old := filepath.Join(t.TempDir(), "runsc")
	in, err := os.Open(testenv.Binary(t, "runsc"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(old, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(io.MultiWriter(out, h), "\nanother runsc build\n")
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	oldBuild := "gvisor-" + hex.EncodeToString(h.Sum(nil))[:16]

	s := startServer(t, "--runsc", old)
	c := s.createProject("proj_keptrunsc")
	id := newSandbox(t, c, api.CreateSandboxRequest{}).SandboxID
	py(t, c, id, "x = 42")
	ctx := context.Background()
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox: %v", err)
	}
	image := filepath.Join(s.dataDir, "images", id)
	if got := recordedBuild(t, image); got != oldBuild {
		t.Fatalf("the image names runsc build %q; want the first binary's, %s", got, oldBuild)
	}

	s.stop()
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	s.args = nil // runsc beside lizard: bin/runsc, another build
	s.start()
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox of the other build's image: %v", err)
	}
	if got := py(t, c, id, "print(x)"); got != "42" {
		t.Errorf("after the resume under the kept build x = %q; want 42", got)
	}
	if _, err := c.PauseSandbox(ctx, id); err != nil {
		t.Fatalf("PauseSandbox of the restored sandbox: %v", err)
	}
	if got := recordedBuild(t, image); got != oldBuild {
		t.Errorf("the restored sandbox's next image names runsc build %q; want its own, %s", got, oldBuild)
	}
	if _, err := c.ResumeSandbox(ctx, id, api.ResumeRequest{}); err != nil {
		t.Fatalf("ResumeSandbox again: %v", err)
	}
	if got := py(t, c, id, "x += 1; print(x)"); got != "43" {
		t.Errorf("after the second resume x + 1 = %q; want 43", got)
	}

	// Once nothing names the first build — the sandbox killed, the
	// template snapshot it made replaced by the new build's — lizard
	// admin check lists it, and --repair removes it.
	if err := c.KillSandbox(ctx, id); err != nil {
		t.Fatalf("KillSandbox: %v", err)
	}
	keptDir := filepath.Join(s.dataDir, "gvisor", "runsc", oldBuild)
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(time.Second) {
		named := false
		recs, _ := filepath.Glob(filepath.Join(s.dataDir, "templates", "*", "lizard-runtime.json"))
		for _, r := range recs {
			named = named || recordedBuild(t, filepath.Dir(r)) == oldBuild
		}
		if !named {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a template snapshot of the first build is still there 5 minutes on: %v", recs)
		}
	}
	s.stop()
	listing, _ := exec.Command(s.bin, "admin", "check", "--data-dir", s.dataDir, "--json").Output()
	var found struct {
		Findings []struct{ Kind, What, Why string }
	}
	if err := json.Unmarshal(listing, &found); err != nil {
		t.Fatalf("admin check --json: %v: %s", err, listing)
	}
	listed := false
	for _, f := range found.Findings {
		t.Logf("admin check: %s %s (%s)", f.Kind, f.What, f.Why)
		listed = listed || (f.Kind == "runsc build no image needs" && f.What == keptDir)
	}
	if !listed {
		t.Errorf("admin check does not list %s, which nothing names", keptDir)
	}
	if _, err := os.Stat(keptCurrent(s.dataDir)); err != nil {
		t.Errorf("the current build is not kept: %v", err)
	}
	if out, err := exec.Command(s.bin, "admin", "check", "--data-dir", s.dataDir, "--repair").CombinedOutput(); err != nil {
		t.Logf("admin check --repair: %v\n%s", err, out)
	}
	if _, err := os.Stat(keptDir); err == nil {
		t.Errorf("%s is still there after admin check --repair", keptDir)
	}
	if _, err := os.Stat(keptCurrent(s.dataDir)); err != nil {
		t.Errorf("admin check --repair removed the current build: %v", err)
	}
}

// keptCurrent is the kept copy of the runsc build the server last ran.
func keptCurrent(dataDir string) string {
	dir := filepath.Join(dataDir, "gvisor")
	return gvisor.KeptRunsc(dir, gvisor.CurrentBuild(dir))
}

func recordedBuild(t *testing.T, image string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(image, "lizard-runtime.json"))
	if err != nil {
		t.Fatalf("the image has no runtime record: %v", err)
	}
	var rec struct {
		Runsc string `json:"runsc"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Runsc
}

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
