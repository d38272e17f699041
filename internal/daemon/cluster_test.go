package daemon

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lizard-build/lizard/internal/cli"
)

// TestChartFlags: every flag the Helm chart passes to a role
// (deploy/helm/lizard/values.yaml: flags, then the role's own) is a flag
// of that role, and parses.
func TestChartFlags(t *testing.T) {
	b, err := os.ReadFile("../../deploy/helm/lizard/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Flags map[string]string
		API   struct{ Flags map[string]string } `yaml:"api"`
		Node  struct{ Flags map[string]string } `yaml:"node"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	e := cli.Env{Stdout: io.Discard, Stderr: io.Discard}
	for role, own := range map[string]map[string]string{"api": v.API.Flags, "node": v.Node.Flags} {
		var args []string
		for _, flags := range []map[string]string{v.Flags, own} {
			for k, val := range flags {
				args = append(args, "--"+k+"="+val)
			}
		}
		var err error
		if role == "api" {
			_, err = parseAPI(e, args)
		} else {
			_, err = parseNode(e, args)
		}
		if err != nil {
			t.Errorf("lizard %s %s: %v", role, strings.Join(args, " "), err)
		}
	}
}

// TestClusterConfig: a cluster role refuses to start without PostgreSQL
// or the shared secret, saying what to set.
func TestClusterConfig(t *testing.T) {
	for _, tc := range []struct {
		url, secret string
		want        string
	}{
		{"", "0123456789abcdef0123456789abcdef0123", "LIZARD_DATABASE_URL"},
		{"sqlite:/tmp/x.db", "0123456789abcdef0123456789abcdef0123", "needs PostgreSQL"},
		{"postgres://u:p@h/db", "", "LIZARD_CLUSTER_SECRET"},
		{"postgres://u:p@h/db", "short", "5 bytes, under the 32"},
		{"postgres://u:p@h/db", "0123456789abcdef0123", "openssl rand -hex 32"},
		{"postgres://u:p@h/db", "CHANGE-ME-to-openssl-rand-hex-32", "placeholder"},
	} {
		t.Setenv(envDatabaseURL, tc.url)
		t.Setenv(envClusterSecret, tc.secret)
		f := clusterFlags{Lease: time.Second * 15}
		if err := f.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("url %q secret %q: %v; want an error naming %q", tc.url, tc.secret, err, tc.want)
		}
	}
	t.Setenv(envDatabaseURL, "postgres://u:p@h/db")
	t.Setenv(envClusterSecret, "0123456789abcdef0123456789abcdef0123")
	c, err := parseNode(cli.Env{Stdout: io.Discard, Stderr: io.Discard}, []string{"--name", "n1", "--listen", "0.0.0.0:8081"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cluster.validate(); err != nil {
		t.Fatal(err)
	}
	c.Advertise = ""
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--advertise") {
		t.Errorf("node listening on 0.0.0.0 with no --advertise: %v; want an error naming --advertise", err)
	}
	// --drain-on-stop asks an api: without its URL the node refuses to
	// start, rather than find out at its stop.
	t.Setenv("LIZARD_API_URL", "")
	c, err = parseNode(cli.Env{Stdout: io.Discard, Stderr: io.Discard}, []string{"--name", "n1", "--drain-on-stop"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--api-url") || !strings.Contains(err.Error(), "LIZARD_API_URL") {
		t.Errorf("--drain-on-stop without an api URL: %v; want an error naming --api-url and LIZARD_API_URL", err)
	}
	t.Setenv("LIZARD_API_URL", "http://api.internal:8080")
	c, err = parseNode(cli.Env{Stdout: io.Discard, Stderr: io.Discard}, []string{"--name", "n1", "--drain-on-stop"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); (err != nil && strings.Contains(err.Error(), "drain-on-stop")) || c.APIURL != "http://api.internal:8080" {
		t.Errorf("--drain-on-stop with LIZARD_API_URL: %v, api URL %q; want it taken from the environment", err, c.APIURL)
	}
}

// TestNodeUsage: `lizard node -h` names the drain commands, which are
// parsed before its flags and so are not among them.
func TestNodeUsage(t *testing.T) {
	_, stderr, err := runCLI(t, "node", "-h")
	if err != nil {
		t.Fatalf("lizard node -h: %v", err)
	}
	for _, want := range []string{"lizard node drain NAME", "lizard node undrain NAME", "LIZARD_CLUSTER_SECRET", "-advertise"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("lizard node -h does not say %q:\n%s", want, stderr)
		}
	}
}
