package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/testenv"
)

// e2bImageScript is E2B's Template SDK (PyPI e2b) building on images of
// a registry: a public one with envs and a command, then a sandbox of
// it; a private one refused without its credentials and built with them,
// and with a GCP service account's key (from_gcp_registry).
const e2bImageScript = `
import json, os
from e2b import Sandbox, Template
name = os.environ["NAME"]
t = Template().from_image(os.environ["IMAGE"]).set_envs({"FROM_E2B": "yes"}).run_cmd("echo built-as-$(id -un) > /home/user/built.txt", user="root")
Template.build(t, name + ":v1")
sb = Sandbox.create(name + ":v1", timeout=120)
try:
    out = sb.commands.run("cat /home/user/built.txt; echo $FROM_E2B $IMAGE_VAR; cat /etc/nonce").stdout
finally:
    sb.kill()
try:
    Template.build(Template().from_image(os.environ["PRIVATE"]), name + "-p")
    refused = ""
except Exception as e:
    refused = str(e)
Template.build(Template().from_image(os.environ["PRIVATE"], username="user", password=os.environ["PASSWORD"]), name + "-p")
key = {"type": "service_account", "client_email": "e2e@e2e.iam.gserviceaccount.com", "private_key": os.environ["PASSWORD"]}
Template.build(Template().from_gcp_registry(os.environ["PRIVATE"], key), name + "-g")
print(json.dumps({"out": out, "refused": refused, "exists": Template.exists(name + "-p"), "gcp": Template.exists(name + "-g")}))
`

// TestE2BTemplateFromImage: E2B's Template SDK's from_image through the
// E2B surface builds on an image of the test's own registry (internal/oci
// pulls it), as Lizard's recipe.from does; from_image's username and
// password pull a private image, which without them is refused, and so
// does from_gcp_registry's service account key (basic auth as _json_key).
func TestE2BTemplateFromImage(t *testing.T) {
	nb := make([]byte, 6)
	rand.Read(nb)
	nonce := hex.EncodeToString(nb)
	password := "pw-" + nonce
	reg := imageRegistry(t, password)
	img := noPythonImage(t, nonce)
	pushImage(t, reg+"/e2e/nopy:1", password, img)
	pushImage(t, reg+"/private/app:1", password, img)
	s := startServer(t, "--registry-allow", reg)
	c := s.createProject("proj_e2bimg")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := "e2b-img-" + nonce
	t.Cleanup(func() {
		for _, n := range []string{name, name + "-p", name + "-g"} {
			c.Templates().Delete(context.Background(), n)
		}
	})
	cmd := exec.CommandContext(ctx, testenv.Python(t), "-c", e2bImageScript)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.url+"/e2b", "E2B_SANDBOX_URL="+s.url+"/e2b/sandbox", "E2B_API_KEY="+s.keys[c],
		"NAME="+name, "IMAGE="+reg+"/e2e/nopy:1", "PRIVATE="+reg+"/private/app:1", "PASSWORD="+password)
	out, err := cmd.Output()
	var got struct {
		Out, Refused string
		Exists, GCP  bool
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &got) != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the E2B script: %v\n%s\n%s\n%s", err, out, stderr, s.logs())
	}
	// The run step is root's: a build runs a step as user with the image's
	// setpriv, which this image (a shell and a few coreutils) has not.
	if want := "built-as-root\nyes from-the-image\n" + nonce; got.Out != want {
		t.Errorf("the sandbox of the image template printed %q; want %q (the run step, the template's env and the image's)", got.Out, want)
	}
	if !strings.Contains(got.Refused, "401") || !got.Exists {
		t.Errorf("the private image: refused without credentials with %q (want the registry's 401), built with them: %v", got.Refused, got.Exists)
	}
	if !got.GCP {
		t.Error("from_gcp_registry of the private image (its service account key as _json_key's password) did not build")
	}
	if strings.Contains(s.logs(), password) {
		t.Error("the registry password is in the server's log")
	}
}
