package warm

import (
	"testing"

	"github.com/lizard-build/lizard/internal/node"
)

// A template image restores only under the disk limit it was taken with:
// a create asking another disk gets no image, and boots.
func TestImageOnlyForItsDisk(t *testing.T) {
	def := node.Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}
	p := New(Config{Limits: def})
	p.setImage("interpreter", "/data/templates/interpreter-0123456789abcdef")
	other := def
	other.DiskBytes = 256 << 20
	if got := p.Image("interpreter", other); got != "" {
		t.Errorf("image for diskMb 256 = %q; want none", got)
	}
	bigger := def
	bigger.MemoryBytes = 2 << 30 // memory and CPU are set at restore
	if got := p.Image("interpreter", bigger); got == "" {
		t.Error("no image for a sandbox asking more memory; want the template's")
	}
}

// With a runtime whose images keep their memory and CPUs (a VM), a create
// asking other memory or CPUs gets no image either; the default shape does.
func TestImageKeepsShape(t *testing.T) {
	def := node.Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}
	p := New(Config{Limits: def, ImagesKeepShape: true})
	p.setImage("interpreter", "/data/templates/interpreter-0123456789abcdef")
	tests := []struct {
		name string
		edit func(*node.Limits)
		want bool
	}{
		{"default shape", func(*node.Limits) {}, true},
		{"more memory", func(l *node.Limits) { l.MemoryBytes = 2 << 30 }, false},
		{"more CPUs", func(l *node.Limits) { l.CPUs = 2 }, false},
		{"other disk", func(l *node.Limits) { l.DiskBytes = 256 << 20 }, false},
		{"more processes", func(l *node.Limits) { l.Processes = 64 }, true},
	}
	for _, tt := range tests {
		l := def
		tt.edit(&l)
		if got := p.Image("interpreter", l) != ""; got != tt.want {
			t.Errorf("%s: image given = %v, want %v", tt.name, got, tt.want)
		}
	}
}
