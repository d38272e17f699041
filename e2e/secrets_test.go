package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// TestSecretsAPI is the secret store through the API and the CLI: set
// (the value on stdin), list (names and times only), replace, delete;
// another project sees none of it; bad names and oversized values are
// 400s naming what is wrong; the server made its key 0600 in its data
// directory; the audit trail has set and delete by key ID, and no log
// or database file holds the value.
func TestSecretsAPI(t *testing.T) {
	s := startServer(t)
	c := s.createProject("proj_sec")
	other := s.createProject("proj_sec_other")
	ctx := context.Background()
	const value = "sk-e2e-9f3c1a0b7d2e4f6a"

	fi, err := os.Stat(filepath.Join(s.dataDir, "secrets.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the server's secrets key: %v, %v; want DATA/secrets.key, mode 0600", fi, err)
	}

	// The CLI reads the value from stdin, never from its arguments.
	cli := exec.Command(s.bin, "secret", "set", "API_TOKEN", "--host", "api.example.test", "--json")
	cli.Env = append(os.Environ(), "LIZARD_API_URL="+s.url, "LIZARD_API_KEY="+s.keys[c])
	cli.Stdin = strings.NewReader(value + "\n")
	out, err := cli.CombinedOutput()
	if err != nil || strings.Contains(string(out), value) || !strings.Contains(string(out), `"name": "API_TOKEN"`) || !strings.Contains(string(out), `"api.example.test"`) {
		t.Fatalf("lizard secret set: %v\n%s", err, out)
	}
	if _, err := c.Secrets().Set(ctx, "OTHER", api.SetSecretRequest{Value: "x", Hosts: []string{"api.example.test"}}); err != nil {
		t.Fatal(err)
	}
	list, err := c.Secrets().List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "API_TOKEN" || list[1].Name != "OTHER" {
		t.Fatalf("Secrets().List = %+v, %v; want API_TOKEN, OTHER", list, err)
	}
	// Listing is names and times: the JSON has no other field.
	raw := rawCall(t, s, s.keys[c], http.MethodGet, "/v1/secrets", "")
	if strings.Contains(raw, value) || strings.Contains(raw, "value") {
		t.Errorf("GET /v1/secrets shows a value: %s", raw)
	}
	again, err := c.Secrets().Set(ctx, "API_TOKEN", api.SetSecretRequest{Value: value + "-2", Hosts: []string{"api.example.test"}})
	if err != nil || !again.UpdatedAt.After(list[0].CreatedAt) && !again.UpdatedAt.Equal(list[0].CreatedAt) || !again.CreatedAt.Equal(list[0].CreatedAt) {
		t.Errorf("replacing API_TOKEN = %+v, %v; want its CreatedAt kept", again, err)
	}

	// Another project sees none of them and cannot delete them.
	if l, err := other.Secrets().List(ctx); err != nil || len(l) != 0 {
		t.Errorf("another project's Secrets().List = %+v, %v; want none", l, err)
	}
	if err := other.Secrets().Delete(ctx, "API_TOKEN"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another project deleting API_TOKEN: %v; want 404", err)
	}

	for _, tc := range []struct {
		name, body, want string
	}{
		{"1BAD", `{"value":"v"}`, "secret name"},
		{"has-dash", `{"value":"v"}`, "secret name"},
		{"OK", `{"value":"` + strings.Repeat("x", 64<<10+1) + `"}`, "value is 65537 bytes"},
		{"OK", `{"value":"` + strings.Repeat("x", 1<<20) + `"}`, "value is over 65536 bytes"},
		{"OK", `{"value":""}`, "value is empty"},
		{"OK", `{"value":"a\nb"}`, "value holds"},
		{"OK", `{}`, "value is empty"},
		{"OK", `{"value":"v","extra":1}`, "extra"},
	} {
		err := rawErr(t, s, s.keys[c], http.MethodPut, "/v1/secrets/"+tc.name, tc.body)
		if err.Status != http.StatusBadRequest || !strings.Contains(err.Message, tc.want) {
			t.Errorf("PUT /v1/secrets/%s with %d bytes = %d %q; want 400 saying %q", tc.name, len(tc.body), err.Status, err.Message, tc.want)
		}
	}
	if err := rawErr(t, s, s.keys[c], http.MethodDelete, "/v1/secrets/bad-name", ""); err.Status != http.StatusBadRequest {
		t.Errorf("DELETE of a bad name = %d %q; want 400", err.Status, err.Message)
	}

	rm := exec.Command(s.bin, "secret", "rm", "OTHER")
	rm.Env = cli.Env
	if out, err := rm.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "OTHER" {
		t.Errorf("lizard secret rm OTHER: %v\n%s", err, out)
	}
	if err := c.Secrets().Delete(ctx, "OTHER"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("deleting OTHER again: %v; want 404", err)
	}

	audit, err := os.ReadFile(filepath.Join(s.dataDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"secret.set","secret":"API_TOKEN"`, `"msg":"secret.delete","secret":"OTHER"`} {
		if !bytes.Contains(audit, []byte(want)) {
			t.Errorf("the audit trail has no %s:\n%s", want, audit)
		}
	}
	noValueOnDisk(t, s, value)
}

// noValueOnDisk fails if value is in the server's log or any file of its
// data directory (the database, its WAL, the audit trail).
func noValueOnDisk(t *testing.T, s *server, value string) {
	t.Helper()
	if strings.Contains(s.logs(), value) {
		t.Errorf("the server's log holds a secret's value")
	}
	filepath.WalkDir(s.dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(value)) {
			t.Errorf("%s holds a secret's value", path)
		}
		return nil
	})
}

// rawCall sends one request with key and returns the body.
func rawCall(t *testing.T, s *server, key, method, path, body string) string {
	t.Helper()
	_, b := send(t, method, s.url+path, body, "Authorization", "Bearer "+key, "Content-Type", "application/json")
	return b
}

// rawErr sends one request that must fail and returns its error.
func rawErr(t *testing.T, s *server, key, method, path, body string) client.Error {
	t.Helper()
	resp, b := send(t, method, s.url+path, body, "Authorization", "Bearer "+key, "Content-Type", "application/json")
	var e struct{ Code, Message string }
	json.Unmarshal([]byte(b), &e)
	return client.Error{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
}
