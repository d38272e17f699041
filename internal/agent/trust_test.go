package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplaceTrust(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bundle.pem")
	const orig = "-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----"
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	blockA := trustBegin + "A\n" + trustEnd
	blockB := trustBegin + "B\n" + trustEnd
	steps := []struct{ block, want string }{
		{blockA, orig + "\n" + blockA},
		{blockA, orig + "\n" + blockA}, // idempotent
		{blockB, orig + "\n" + blockB}, // a fork's own CA replaces its parent's
		{"", orig + "\n"},              // removed
	}
	for i, s := range steps {
		if err := replaceTrust(path, s.block); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != s.want {
			t.Errorf("step %d: bundle = %q; want %q", i, got, s.want)
		}
		if strings.Count(string(got), trustBegin) > 1 {
			t.Errorf("step %d: two egress CAs in the bundle", i)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode = %v; want 0644 kept", fi.Mode().Perm())
	}
	if err := replaceTrust(filepath.Join(t.TempDir(), "missing.pem"), blockA); err != nil {
		t.Errorf("a missing bundle: %v; want it left missing", err)
	}
}
