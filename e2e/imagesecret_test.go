package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestImageTemplatePasswordSecret builds on a private image of the test's
// registry (named localhost: a secret's hosts are names) with its
// password named by a secret of the project (registry.passwordSecret):
// refused while the secret does not allow the registry's plain HTTP, built
// once it does, and the value is in no record or log line.
func TestImageTemplatePasswordSecret(t *testing.T) {
	nonceB := make([]byte, 6)
	rand.Read(nonceB)
	nonce := hex.EncodeToString(nonceB)
	password := "pw-" + nonce
	reg := "localhost:" + strings.SplitN(imageRegistry(t, password), ":", 2)[1]
	s := startServer(t, "--registry-allow", reg)
	c := s.createProject("proj_imgsec")
	ctx := context.Background()
	digest := pushImage(t, reg+"/private/app:1", password, noPythonImage(t, nonce))
	req := api.BuildTemplateRequest{Name: "e2e-imgsec", Recipe: api.TemplateRecipe{From: reg + "/private/app:1"},
		Registry: &api.RegistryAuth{Username: "user", PasswordSecret: "REGISTRY_PW"}}

	if _, err := c.Secrets().Set(ctx, "REGISTRY_PW", api.SetSecretRequest{Value: password, Hosts: []string{"localhost"}}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := buildTemplate(t, c, req)
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 403 || !strings.Contains(apiErr.Message, "may not be sent over plain HTTP") {
		t.Errorf("a secret without allowHttp for a plain-HTTP registry = %v; want a 403 saying so", err)
	}
	if _, err := c.Secrets().Set(ctx, "REGISTRY_PW", api.SetSecretRequest{Value: password, Hosts: []string{"localhost"}, AllowHTTP: true}); err != nil {
		t.Fatal(err)
	}
	tpl, _, _, err := buildTemplate(t, c, req)
	if err != nil || tpl.Digest != digest {
		t.Fatalf("the private image with its password from the secret = %+v, %v; want it built, digest %s\n%s", tpl, err, digest, s.logs())
	}
	defer c.Templates().Delete(context.WithoutCancel(ctx), "e2e-imgsec")
	if got, err := c.Templates().Get(ctx, "e2e-imgsec"); err != nil || strings.Contains(s.logs(), password) {
		t.Errorf("the template's record %+v, %v; the password must be in no record or log line", got, err)
	}
	audit, _ := os.ReadFile(filepath.Join(s.dataDir, "audit.log"))
	if !strings.Contains(string(audit), "secret.use") || !strings.Contains(string(audit), `"secret":"REGISTRY_PW"`) ||
		!strings.Contains(string(audit), `"host":"localhost"`) || strings.Contains(string(audit), password) {
		t.Errorf("audit.log: want the secret's use for localhost, never its value:\n%s", audit)
	}
}
