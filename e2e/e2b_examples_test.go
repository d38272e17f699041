package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
)

// TestE2BExamples is issue 23's "done when" on one machine: the two files
// of examples/e2b, written for E2B's SDKs with nothing of Lizard's in them
// (code interpreter, commands, PTY, files, pause/resume), run unchanged
// against lizard serve with only E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY set; each checks every answer and exits non-zero at the
// first wrong one. TestE2BCluster runs them against lizard api + nodes.
func TestE2BExamples(t *testing.T) {
	node := e2bNodeExample(t)
	s := startServer(t)
	c := s.createProject("proj_e2bexamples")
	runE2BExamples(t, node, [2]string{s.url, s.url}, s.keys[c])
}

// e2bNodeExample installs examples/e2b's npm packages (its lockfile:
// @e2b/code-interpreter and the e2b it pins) into a directory of the test's
// with example.mjs, and returns that directory. `make test` runs the Go
// tests before the TypeScript SDK's npm ci, so nothing else has them yet.
func e2bNodeExample(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is needed to install E2B's JavaScript SDK: %v", err)
	}
	src := filepath.Join(testenv.RepoRoot(t), "examples", "e2b")
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "example.mjs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of examples/e2b: %v\n%s", err, out)
	}
	return dir
}

// runE2BExamples runs examples/e2b/example.py (with the test venv's e2b
// packages) and example.mjs (from nodeDir) at once, the Python one against
// urls[0] and the JavaScript one against urls[1], with key as E2B_API_KEY
// and no other E2B variable.
func runE2BExamples(t *testing.T, nodeDir string, urls [2]string, key string) {
	t.Helper()
	python := testenv.Python(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runs := []struct {
		name string
		cmd  *exec.Cmd
	}{
		{"example.py", exec.CommandContext(ctx, python, filepath.Join(testenv.RepoRoot(t), "examples", "e2b", "example.py"))},
		{"example.mjs", exec.CommandContext(ctx, node, filepath.Join(nodeDir, "example.mjs"))},
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "E2B_") {
				env = append(env, kv)
			}
		}
		r.cmd.Env = append(env,
			"E2B_API_URL="+urls[i]+"/e2b",
			"E2B_SANDBOX_URL="+urls[i]+"/e2b/sandbox",
			"E2B_API_KEY="+key,
		)
		r.cmd.Dir = nodeDir
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			out, err := r.cmd.CombinedOutput()
			lines := strings.Split(string(bytes.TrimSpace(out)), "\n")
			if err != nil || lines[len(lines)-1] != "ok" {
				t.Errorf("%s against %s: %v\n%s", r.name, urls[i], err, out)
				return
			}
			t.Logf("%s against %s: %d checks passed in %.1fs", r.name, urls[i], len(lines)-1, time.Since(began).Seconds())
		}()
	}
	wg.Wait()
}
