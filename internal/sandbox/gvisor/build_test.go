package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// TestRestoreOtherBuild: an image whose record names another runsc build,
// not kept, is refused with ErrOtherBuild, naming the image, both builds
// and where the missing one would be kept, before runsc is run (a failed
// restore would cost the image); one naming this build, a kept one, or
// none (an older Lizard's), gets past the check.
func TestRestoreOtherBuild(t *testing.T) {
	r := newTestRuntime(t)
	kept := KeptRunsc(r.root, "gvisor-1111111111111111")
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kept, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, record string
		other        bool
	}{
		{"another build", `{"layout":0,"diskBytes":0,"runsc":"gvisor-0000000000000000","lizard":"0.0.9"}`, true},
		{"a build no path can name", `{"layout":0,"diskBytes":0,"runsc":"gvisor-../../x","lizard":"0.0.9"}`, true},
		{"this build", `{"layout":0,"diskBytes":1,"runsc":"` + r.ImageKey() + `"}`, false},
		{"a kept build", `{"layout":0,"diskBytes":1,"runsc":"gvisor-1111111111111111"}`, false},
		{"no build recorded", `{"layout":0,"diskBytes":1}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := t.TempDir()
			for name, data := range map[string]string{"checkpoint.img": "", imageRecordName: tt.record} {
				if err := os.WriteFile(filepath.Join(img, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A disk limit no record has: past checkBuild, checkDisk
			// refuses it, so nothing boots.
			spec := sandbox.Spec{ID: "other-build", Limits: sandbox.Limits{DiskBytes: 2}}
			err := r.Restore(context.Background(), spec, img)
			if got := errors.Is(err, sandbox.ErrOtherBuild); got != tt.other {
				t.Fatalf("Restore = %v; ErrOtherBuild %v, want %v", err, got, tt.other)
			}
			if tt.other {
				for _, want := range []string{img, "Lizard 0.0.9", r.ImageKey()} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Restore = %v; want it to name %s", err, want)
					}
				}
				if k := KeptRunsc(r.root, "gvisor-0000000000000000"); tt.name == "another build" && !strings.Contains(err.Error(), k) {
					t.Errorf("Restore = %v; want it to say where the build would be kept, %s", err, k)
				}
			} else if !errors.Is(err, sandbox.ErrImage) {
				t.Errorf("Restore = %v; want the disk check's ErrImage", err)
			}
		})
	}
}
