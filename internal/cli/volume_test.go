package cli

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/lizard-build/lizard/api"
)

func TestSandboxCreateVolumes(t *testing.T) {
	e := Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	a, err := parseSandboxCreate(e, []string{"--volume", "data:/home/user/data", "--volume=cache:/mnt/cache", "--public-ports"})
	if err != nil {
		t.Fatal(err)
	}
	want := []api.VolumeMount{{Name: "data", Path: "/home/user/data"}, {Name: "cache", Path: "/mnt/cache"}}
	if !reflect.DeepEqual(a.req.Volumes, want) || !a.req.PublicPorts {
		t.Errorf("volumes %+v public %v; want %+v and public", a.req.Volumes, a.req.PublicPorts, want)
	}
	for _, bad := range []string{"data", ":/x", "data:"} {
		if _, err := parseSandboxCreate(e, []string{"--volume", bad}); err == nil {
			t.Errorf("--volume %q: no error; want one asking for NAME:PATH", bad)
		}
	}
}
