package node

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSavedEnv: a disk-only image's environment, with the resume's own on
// top, one entry a name, without what a boot cannot take or the agent's
// own settings.
func TestSavedEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		saved string
		over  []string
		want  []string
	}{
		{"kept", `{"env":["A=1","PATH=/bin"]}`, nil, []string{"A=1", "PATH=/bin"}},
		{"the resume's win", `{"env":["A=1","LIZARD_API_URL=http://old"]}`, []string{"LIZARD_API_URL=http://new", "B=2"},
			[]string{"A=1", "LIZARD_API_URL=http://new", "B=2"}},
		{"unbootable dropped", `{"env":["NOEQUALS","=x","A=a\u0000b","LIZARD_AGENT_SECRET=s","C=3"]}`, nil, []string{"C=3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, envFile), []byte(tc.saved), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := savedEnv(dir, tc.over)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("savedEnv = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := savedEnv(t.TempDir(), nil); err == nil {
		t.Errorf("savedEnv of an image without %s: no error", envFile)
	}
}
