package cli

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestNetworkDefault(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"PUT /v1/network/default":    reply(200, `{"default":"deny","allow":["a.test"]}`),
		"GET /v1/network/default":    reply(404, `{"code":"not_found","message":"this project has no default network policy"}`),
		"DELETE /v1/network/default": reply(204, ``),
	})
	out, _, err := lizard(t, "network", "default", "--network-default", "deny", "--allow-domain", "a.test")
	if err != nil || !strings.Contains(out, "default: deny") || !strings.Contains(out, "a.test") {
		t.Fatalf("network default set: %q (%v)", out, err)
	}
	if got, want := f.last().body, map[string]any{"default": "deny", "allow": []any{"a.test"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("body = %v, want %v", got, want)
	}
	out, _, err = lizard(t, "network", "default")
	if err != nil || !strings.Contains(out, "no default network policy") {
		t.Errorf("network default of a project without one: %q (%v)", out, err)
	}
	out, _, err = lizard(t, "network", "default", "--clear")
	if err != nil || !strings.Contains(out, "cleared") || f.last().method != http.MethodDelete {
		t.Errorf("network default --clear: %q (%v)", out, err)
	}
	for _, args := range [][]string{{"default", "--clear", "--allow-domain", "a.test"}, {"default", "extra"}, {"nope"}} {
		if _, _, err := lizard(t, append([]string{"network"}, args...)...); ExitCode(err) != 2 {
			t.Errorf("network %q: %v, want a usage error", args, err)
		}
	}
}
