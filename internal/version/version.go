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
