// Package version is Lizard's one semantic version, which every binary
// (lizard, lizard-agent, lizard-client), GET /v1/health and the agent's
// GET /health report. It lives in the file VERSION beside this one, embedded,
// so that a plain `go build` reports it without the Makefile; the SDKs'
// package versions and CHANGELOG.md's latest release are checked against it
// (version_test.go). A leaf: the agent links it, so it imports no Lizard code.
package version

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var file string

// Version is Lizard's semantic version, MAJOR.MINOR.PATCH.
var Version = strings.TrimSpace(file)

// Commit is the VCS revision the binary was built from (12 hex digits, with
// "-dirty" when the tree had changes), or "" when the build recorded none
// (a build outside a git checkout, or with -buildvcs=false).
func Commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value[:min(12, len(st.Value))]
		case "vcs.modified":
			if st.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// Line is what `PROGRAM --version` prints: the program, its version, and
// the commit and Go release it was built with.
func Line(program string) string {
	s := fmt.Sprintf("%s %s", program, Version)
	if c := Commit(); c != "" {
		s += " (commit " + c + ", " + runtime.Version() + ")"
	} else {
		s += " (" + runtime.Version() + ")"
	}
	return s
}

// Unreported is the version of a peer that reports none: 0.1.0, the last
// release whose `lizard node` did not register with its version.
const Unreported = "0.1.0"

// Compatible reports whether Lizards of versions a and b work together —
// a `lizard api` and a `lizard node`, whose internal API and database
// rows change between releases: the same major version, and while the
// major is 0 (where any minor release may break, semver's rule), the same
// minor. Patch releases always work together, so a cluster is upgraded
// one process at a time (docs/cluster.md). A version that does not parse
// is compatible with none.
func Compatible(a, b string) bool {
	am, an, ok1 := majorMinor(a)
	bm, bn, ok2 := majorMinor(b)
	return ok1 && ok2 && am == bm && (am != "0" || an == bn)
}

// Span names the versions compatible with v: "0.1.x" for 0.1.3, "1.x"
// for 1.4.0.
func Span(v string) string {
	major, minor, ok := majorMinor(v)
	switch {
	case !ok:
		return v
	case major == "0":
		return "0." + minor + ".x"
	}
	return major + ".x"
}

func majorMinor(v string) (major, minor string, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}
