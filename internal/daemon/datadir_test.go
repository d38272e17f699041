package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLockDataDir: a data directory is one server's; a second lock on it
// fails naming the holder's pid and the flag to change, and it is free again
// once the first lets go (flock conflicts between open files, in one
// process too, as between a running server and a second one started).
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	release, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "serve.lock")); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("serve.lock holds %q, want this pid %d", b, os.Getpid())
	}
	_, err = lockDataDir(dir)
	if err == nil {
		t.Fatal("second lock on a held data directory: got nil, want an error")
	}
	for _, want := range []string{dir, "in use by another lizard serve or node", "pid " + strconv.Itoa(os.Getpid()), "--data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second lock: %q does not say %q", err, want)
		}
	}
	release()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again()
	if _, err := lockDataDir(filepath.Join(dir, "missing", "deeper")); err == nil {
		t.Error("lock in a directory that does not exist: got nil, want an error")
	}
}
