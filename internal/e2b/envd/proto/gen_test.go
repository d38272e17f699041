package proto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedUpToDate regenerates the Go code into a temporary
// directory and compares it with the committed files: a .proto edited
// without `go generate` fails here.
func TestGeneratedUpToDate(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./gen", "-out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./gen: %v\n%s", err, b)
	}
	n := 0
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rel, _ := filepath.Rel(out, p)
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(rel)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what go generate makes of the .proto files: run go generate ./internal/e2b/envd/proto", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("generated %d files, want 4 (two .pb.go, two .connect.go)", n)
	}
}
