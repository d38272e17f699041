package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// TestKeptFiles: a sandbox's files are mounted from copies kept by content,
// which its image's record names; a restore mounts the copies its image
// names, not the files of today, and refuses (ErrOtherBuild, saying where)
// an image whose copies are gone, or one of 0.1.0 (no record of them) while
// the file Unrecorded names for it is missing.
func TestKeptFiles(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "lizard-agent")
	write := func(p, data string, at time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, at, at)
	}
	write(agent, "agent v1", time.Unix(1, 0))
	old := filepath.Join(dir, "data", "0.1.0", "lizard-agent")
	r := &Runtime{root: filepath.Join(dir, "gvisor"), kept: map[string]keptFile{},
		unrecorded: map[string]string{"/opt/agent": old}}
	files := []sandbox.File{{Source: agent, Target: "/opt/agent"}}

	boot, rec1, err := r.keepFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(boot[0].Source); err != nil || string(b) != "agent v1" || !strings.HasPrefix(boot[0].Source, r.filesDir()) {
		t.Fatalf("mounted %s (%q, %v); want a copy of the agent under %s", boot[0].Source, b, err, r.filesDir())
	}
	// The agent replaced (an upgrade): a new copy; the first one stays.
	write(agent, "agent v2", time.Unix(2, 0))
	_, rec2, err := r.keepFiles(files)
	if err != nil || rec2["/opt/agent"] == rec1["/opt/agent"] {
		t.Fatalf("after the agent changed: %v, %v; want a copy of its own beside %v", rec2, err, rec1)
	}

	spec := sandbox.Spec{ID: "sb", Files: files}
	got, kept, err := r.restoredFiles(spec, "IMG", imageRecord{Files: rec1})
	if err != nil || len(got) != 1 || kept["/opt/agent"] != rec1["/opt/agent"] {
		t.Fatalf("restore of an image made with v1 = %v, %v, %v", got, kept, err)
	}
	if b, _ := os.ReadFile(got[0].Source); string(b) != "agent v1" {
		t.Errorf("restore of an image made with v1 mounts %q; want v1", b)
	}
	os.RemoveAll(filepath.Join(r.filesDir(), filepath.Dir(rec1["/opt/agent"])))
	if _, _, err := r.restoredFiles(spec, "IMG", imageRecord{Files: rec1}); !errors.Is(err, sandbox.ErrOtherBuild) || !strings.Contains(err.Error(), rec1["/opt/agent"]) {
		t.Errorf("restore with its copy gone = %v; want ErrOtherBuild naming it", err)
	}
	// 0.1.0's image: refused until its agent is where Unrecorded says.
	if _, _, err := r.restoredFiles(spec, "IMG", imageRecord{}); !errors.Is(err, sandbox.ErrOtherBuild) || !strings.Contains(err.Error(), old) {
		t.Errorf("restore of an image without files recorded = %v; want ErrOtherBuild naming %s", err, old)
	}
	write(old, "agent 0.1.0", time.Unix(3, 0))
	got, kept, err = r.restoredFiles(spec, "IMG", imageRecord{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(got[0].Source); string(b) != "agent 0.1.0" || kept["/opt/agent"] == "" {
		t.Errorf("restore of 0.1.0's image mounts %q, records %v; want 0.1.0's agent, kept", b, kept)
	}
	// A target the image's build did not mount: today's file.
	spec.Files = append(spec.Files, sandbox.File{Source: agent, Target: "/opt/new"})
	if got, _, err := r.restoredFiles(spec, "IMG", imageRecord{Files: map[string]string{"/opt/agent": kept["/opt/agent"]}}); err != nil || len(got) != 2 {
		t.Errorf("restore with a file its image did not have = %v, %v", got, err)
	} else if b, _ := os.ReadFile(got[1].Source); string(b) != "agent v2" {
		t.Errorf("the new file mounted %q; want today's", b)
	}
}
