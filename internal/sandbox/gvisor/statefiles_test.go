package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestHalfMadeStateFilesRemoved checks that Kill removes the lock file and
// control socket a runsc create or restore killed before writing its
// .state file leaves in the state directory (the chaos suite's kill -9
// during a resume), and leaves another sandbox's alone.
func TestHalfMadeStateFilesRemoved(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	files := func(id string) []string {
		cid := containerID(id)
		return []string{
			filepath.Join(r.stateDir, cid+"_sandbox:"+cid+".lock"),
			filepath.Join(r.stateDir, "runsc-"+cid+".sock"),
		}
	}
	half, other := "chaos-1", "x-chaos-1"
	for _, id := range []string{half, other} {
		if err := os.Mkdir(r.dir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files(id) {
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { r.Kill(ctx, other) })
	if err := r.Kill(ctx, half); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	for _, f := range files(half) {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s is left after Kill", f)
		}
	}
	for _, f := range files(other) {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("another sandbox's %s was removed: %v", f, err)
		}
	}
	if err := r.Kill(ctx, other); err != nil {
		t.Fatalf("Kill(%s): %v", other, err)
	}
	if ents, _ := os.ReadDir(r.stateDir); len(ents) > 0 {
		t.Errorf("state directory after both kills: %v", ents)
	}
}
