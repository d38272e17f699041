package server

import "testing"

func TestDropParam(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"b=2&a=1", "b=2&a=1"},
		{"b=2&lizard_access_token=x&a=%2F", "b=2&a=%2F"},
		{"lizard_access_token=x", ""},
		{"lizard_access_token_2=y&lizard_access_token=x", "lizard_access_token_2=y"},
	} {
		if got := dropParam(tc.in, AccessTokenParam); got != tc.want {
			t.Errorf("dropParam(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
