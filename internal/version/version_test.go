package version

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/testenv"
)

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func TestVersionIsSemantic(t *testing.T) {
	if !semver.MatchString(Version) {
		t.Fatalf("Version = %q, want MAJOR.MINOR.PATCH", Version)
	}
	if l := Line("lizard"); !strings.HasPrefix(l, "lizard "+Version+" (") {
		t.Errorf("Line = %q, want it to start %q", l, "lizard "+Version+" (")
	}
}

// TestOneVersion keeps every place that states Lizard's version equal to
// VERSION: the SDKs' and the console's package versions, the SDKs' version
// constants, and CHANGELOG.md's latest release. A release bumps VERSION and
// this test names what else to bump.
func TestOneVersion(t *testing.T) {
	root := testenv.RepoRoot(t)
	for _, c := range []struct {
		file string
		re   string // its first group is the version
	}{
		{"sdk/python/pyproject.toml", `(?m)^version = "([^"]+)"`},
		{"sdk/python/src/lizard/_version.py", `(?m)^__version__ = "([^"]+)"`},
		{"sdk/typescript/package.json", `(?m)^  "version": "([^"]+)"`},
		{"sdk/typescript/src/version.ts", `(?m)^export const VERSION = '([^']+)'`},
		{"web/console/package.json", `(?m)^  "version": "([^"]+)"`},
		{"CHANGELOG.md", `(?m)^## \[?([0-9][^\] ]*)\]?`},
	} {
		b, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(c.re).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s states no version (want a match of %s)", c.file, c.re)
			continue
		}
		if got := string(m[1]); got != Version {
			t.Errorf("%s says %s, internal/version/VERSION %s: bump them together", c.file, got, Version)
		}
	}
}

func TestCompatible(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"0.1.0", "0.1.0", true},
		{"0.1.0", "0.1.7", true},
		{"0.1.0", "0.2.0", false},
		{"1.2.0", "1.9.3", true},
		{"1.0.0", "2.0.0", false},
		{"0.9.0", "1.0.0", false},
		{"1.0.0-rc.1", "1.3.0", true},
		{"0.1.0", "", false},
		{"0.1", "0.1.0", false},
		{"garbage", "garbage", false},
	} {
		if got := Compatible(tt.a, tt.b); got != tt.want {
			t.Errorf("Compatible(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := Compatible(tt.b, tt.a); got != tt.want {
			t.Errorf("Compatible(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestSpan(t *testing.T) {
	for v, want := range map[string]string{"0.1.3": "0.1.x", "1.4.0": "1.x", "2.0.0-rc.1": "2.x"} {
		if got := Span(v); got != want {
			t.Errorf("Span(%q) = %q, want %q", v, got, want)
		}
	}
}
