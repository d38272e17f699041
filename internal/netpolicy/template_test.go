package netpolicy

import (
	"errors"
	"strings"
	"testing"
)

// TestExpandTemplate is the expansion the secrets injector does per
// request (internal/secrets/inject): every reference, repeats and text
// around them, and the lookup's error, never a half-expanded value.
func TestExpandTemplate(t *testing.T) {
	vals := map[string]string{"A": "alpha", "B_2": "beta"}
	lookup := func(n string) (string, error) {
		if v, ok := vals[n]; ok {
			return v, nil
		}
		return "", errors.New("no secret " + n)
	}
	for _, tc := range []struct{ in, want, err string }{
		{in: "Bearer {{ secrets.A }}", want: "Bearer alpha"},
		{in: "{{secrets.A}}:{{  secrets.B_2  }}", want: "alpha:beta"},
		{in: "{{ secrets.A }}{{ secrets.A }}", want: "alphaalpha"},
		{in: "plain text", want: "plain text"},
		{in: "token {{ secrets.A }} {{ secrets.NONE }}", err: "no secret NONE"},
	} {
		got, err := ExpandTemplate(tc.in, lookup)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ExpandTemplate(%q) = %q, %v; want error %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ExpandTemplate(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"{{ env.HOME }}", "{{ secrets.A }", "x }} y", "{{ secrets.1A }}"} {
		if _, err := TemplateSecrets(bad); err == nil {
			t.Errorf("TemplateSecrets(%q) accepted it", bad)
		}
	}
}
