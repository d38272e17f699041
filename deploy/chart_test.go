// Package deploy holds the Kubernetes deployment (helm/lizard, and
// manifests/ generated from it); its tests check the chart: helm lint,
// helm template validated against the Kubernetes schemas offline
// (kubernetes-validate, from the test venv), and the committed manifests
// being what the chart renders.
//
// helm is .cache/bin/helm (make helm), $LIZARD_HELM or on PATH;
// kubernetes-validate is next to $LIZARD_TEST_PYTHON, in .cache/testvenv or
// on PATH. Without them the tests skip, or fail under LIZARD_TEST_STRICT=1.
package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	chart     = "helm/lizard"
	manifests = "manifests/lizard.yaml"
	// The database URL the committed manifests carry: a placeholder to edit.
	placeholderURL = "postgres://lizard:CHANGE-ME@postgresql.lizard.svc:5432/lizard?sslmode=require"
	// The cluster secret they carry: a placeholder to replace.
	placeholderSecret = "CHANGE-ME-to-openssl-rand-hex-32"
)

// kubeVersions are the Kubernetes versions the chart is validated against
// (kubernetes-validate's offline schemas).
var kubeVersions = []string{"1.35.0", "1.36.0", "1.37.0"}

// manifestArgs render the committed manifests: release lizard in namespace
// lizard, the default values with the placeholder URL.
var manifestArgs = []string{"template", "lizard", chart, "--namespace", "lizard", "--set", "database.url=" + placeholderURL,
	"--set", "clusterSecret=" + placeholderSecret}

const manifestHeader = "# Generated from deploy/helm/lizard by `make manifests` (helm template lizard --namespace lizard):\n" +
	"# do not edit. Set the database URL in the Secret below before applying: docs/kubernetes.md.\n" +
	"# Set the cluster secret there too (openssl rand -hex 32).\n"

func need(t *testing.T, what, why string) {
	t.Helper()
	if os.Getenv("LIZARD_TEST_STRICT") == "1" {
		t.Fatalf("%s not found: %s", what, why)
	}
	t.Skipf("%s not found: %s (LIZARD_TEST_STRICT=1 makes this a failure)", what, why)
}

func helmBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LIZARD_HELM"), "../.cache/bin/helm"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	need(t, "helm", "make helm installs it into .cache/bin")
	return ""
}

func validatorBin(t *testing.T) string {
	t.Helper()
	var candidates []string
	if py := os.Getenv("LIZARD_TEST_PYTHON"); py != "" {
		candidates = append(candidates, filepath.Join(filepath.Dir(py), "kubernetes-validate"))
	}
	candidates = append(candidates, "../.cache/testvenv/bin/kubernetes-validate")
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	if p, err := exec.LookPath("kubernetes-validate"); err == nil {
		return p
	}
	need(t, "kubernetes-validate", "make testvenv installs it (test/requirements.txt)")
	return ""
}

// run runs a tool with a bound on its time, returning stdout; stderr goes
// into the error.
func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &toolError{err: err, stderr: stderr.String() + stdout.String()}
	}
	return stdout.Bytes(), nil
}

type toolError struct {
	err    error
	stderr string
}

func (e *toolError) Error() string { return e.err.Error() + ": " + e.stderr }

func render(t *testing.T, helm string) []byte {
	t.Helper()
	out, err := run(t, helm, manifestArgs...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return append([]byte(manifestHeader), out...)
}

func TestHelmLint(t *testing.T) {
	helm := helmBin(t)
	for _, set := range [][]string{
		{"database.url=" + placeholderURL, "clusterSecret=" + placeholderSecret},
		{"database.existingSecret=lizard-db", "api.replicas=1"},
	} {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := run(t, helm, args...); err != nil {
			t.Errorf("helm lint --set %v: %v\n%s", set, err, out)
		}
	}
}

// The committed manifests are what the chart renders; LIZARD_UPDATE_MANIFESTS=1
// (make manifests) rewrites them.
func TestManifestsUpToDate(t *testing.T) {
	got := render(t, helmBin(t))
	if os.Getenv("LIZARD_UPDATE_MANIFESTS") == "1" {
		if err := os.WriteFile(manifests, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatalf("reading the committed manifests: %v (make manifests writes them)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/%s is not what deploy/%s renders: run `make manifests` and commit the result", manifests, chart)
	}
}

// What the chart renders, in its variants, is valid Kubernetes of every
// version in kubeVersions, strictly (no unknown fields).
func TestTemplateValidates(t *testing.T) {
	helm, validate := helmBin(t), validatorBin(t)
	variants := map[string][]string{
		"defaults":        {"database.url=" + placeholderURL, "clusterSecret=" + placeholderSecret},
		"existing secret": {"database.existingSecret=lizard-db", "api.replicas=1", "api.service.type=LoadBalancer"},
		"tolerations":     {"database.url=" + placeholderURL, "clusterSecret=" + placeholderSecret, "node.tolerations[0].operator=Exists", "node.updateStrategy.type=OnDelete", "node.updateStrategy.rollingUpdate=null"},
		"tracing":         {"database.url=" + placeholderURL, "clusterSecret=" + placeholderSecret, "tracing.endpoint=http://otel-collector:4318", "tracing.env.OTEL_EXPORTER_OTLP_HEADERS=x-key=y"},
	}
	dir := t.TempDir()
	for name, set := range variants {
		args := []string{"template", "lizard", chart, "--namespace", "lizard"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := run(t, helm, args...)
		if err != nil {
			t.Errorf("%s: helm template: %v", name, err)
			continue
		}
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(f, out, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, v := range kubeVersions {
			if res, err := run(t, validate, "--strict", "--quiet", "-k", v, f); err != nil {
				t.Errorf("%s: not valid Kubernetes %s: %v\n%s", name, v, err, res)
			}
		}
		kinds := map[string]int{}
		for _, line := range strings.Split(string(out), "\n") {
			if k, ok := strings.CutPrefix(line, "kind: "); ok {
				kinds[k]++
			}
		}
		for _, must := range []string{"hostNetwork: true", "privileged: true", "path: /v1/health", "mountPropagation: Bidirectional",
			"- api\n", "- node\n", "--listen=$(LIZARD_FLAG_LISTEN)", "name: LIZARD_DATABASE_URL", "name: LIZARD_CLUSTER_SECRET", "type: DirectoryOrCreate"} {
			if !strings.Contains(string(out), must) {
				t.Errorf("%s: rendered chart lacks %q", name, must)
			}
		}
		want := map[string]int{"ServiceAccount": 1, "ConfigMap": 1, "Service": 1, "Deployment": 1, "DaemonSet": 1}
		if name != "existing secret" {
			want["Secret"], want["PodDisruptionBudget"] = 1, 1
		}
		for k, n := range want {
			if kinds[k] != n {
				t.Errorf("%s: %d %s; want %d (kinds: %v)", name, kinds[k], k, n, kinds)
			}
		}
	}
}

// Tracing is off by default (no OTEL_* variable at all); its values become
// the standard variables on both the api Deployment and the node
// DaemonSet, and a name outside OTEL_* is refused.
func TestTemplateTracing(t *testing.T) {
	helm := helmBin(t)
	base := []string{"template", "lizard", chart, "--namespace", "lizard", "--set", "database.url=" + placeholderURL, "--set", "clusterSecret=" + placeholderSecret}
	out, err := run(t, helm, base...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if strings.Contains(string(out), "OTEL_") {
		t.Errorf("the default chart sets OTEL_* variables; tracing must be off by default")
	}
	out, err = run(t, helm, append(base, "--set", "tracing.endpoint=http://otel-collector.observability:4318",
		"--set", "tracing.sampler=parentbased_traceidratio", "--set", "tracing.samplerArg=0.25",
		"--set", "tracing.env.OTEL_BSP_MAX_QUEUE_SIZE=4096")...)
	if err != nil {
		t.Fatalf("helm template with tracing: %v", err)
	}
	for _, want := range []string{
		"- name: OTEL_EXPORTER_OTLP_ENDPOINT\n              value: \"http://otel-collector.observability:4318\"",
		"- name: OTEL_TRACES_SAMPLER\n              value: \"parentbased_traceidratio\"",
		"- name: OTEL_TRACES_SAMPLER_ARG\n              value: \"0.25\"",
		"- name: OTEL_BSP_MAX_QUEUE_SIZE\n              value: \"4096\"",
	} {
		if n := strings.Count(string(out), want); n != 2 {
			t.Errorf("%q appears %d times; want once on the api pods and once on the node pods", want, n)
		}
	}
	_, err = run(t, helm, append(base, "--set", "tracing.env.LIZARD_SECRET=x")...)
	if err == nil || !strings.Contains(err.Error(), "tracing.env.LIZARD_SECRET") {
		t.Errorf("helm template with a non-OTEL tracing.env = %v; want an error naming it", err)
	}
}

// Without a database the chart refuses to render, saying what to set.
func TestTemplateNeedsDatabase(t *testing.T) {
	_, err := run(t, helmBin(t), "template", "lizard", chart)
	if err == nil || !strings.Contains(err.Error(), "database.url") {
		t.Fatalf("helm template without a database = %v; want an error naming database.url", err)
	}
}

// TestTemplateShortSecret: the chart refuses a cluster secret under 32
// bytes, which lizard would refuse at start.
func TestTemplateShortSecret(t *testing.T) {
	_, err := run(t, helmBin(t), "template", "lizard", chart, "--set", "database.url="+placeholderURL, "--set", "clusterSecret=0123456789abcdef0123")
	if err == nil || !strings.Contains(err.Error(), "clusterSecret is 20 bytes") || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Fatalf("helm template with a 20-byte cluster secret = %v; want an error naming clusterSecret and openssl rand -hex 32", err)
	}
}

// A node pod drains itself when it stops: lizard node --drain-on-stop has
// the api Service drain it (the node named by LIZARD_NODE_NAME) at SIGTERM,
// within a grace period long enough for the moves, and the next pod takes
// sandboxes again (--undrain-at-start). node.drainOnStop=false renders
// neither the flag nor its API URL. No preStop hook: the drain is the
// node's own (e2e/TestClusterDrainOnStop runs it), and a hook beside it
// would drain twice.
func TestTemplateDrainOnStop(t *testing.T) {
	helm := helmBin(t)
	base := []string{"template", "lizard", chart, "--namespace", "lizard", "--set", "database.url=" + placeholderURL, "--set", "clusterSecret=" + placeholderSecret}
	for _, tc := range []struct {
		name string
		set  []string
		want bool
	}{
		{"default", nil, true},
		{"off", []string{"--set", "node.drainOnStop=false"}, false},
	} {
		out, err := run(t, helm, append(base, tc.set...)...)
		if err != nil {
			t.Fatalf("%s: helm template: %v", tc.name, err)
		}
		ds := string(out)
		if i := strings.Index(ds, "kind: DaemonSet"); i >= 0 {
			ds = ds[i:]
		} else {
			t.Fatalf("%s: no DaemonSet rendered", tc.name)
		}
		for _, want := range []string{
			"\n            - --drain-on-stop\n",
			"- name: LIZARD_API_URL\n              value: \"http://lizard-api.lizard.svc:80\"",
		} {
			if got := strings.Contains(ds, want); got != tc.want {
				t.Errorf("%s: the node DaemonSet has %q: %v; want %v", tc.name, want, got, tc.want)
			}
		}
		if strings.Contains(ds, "preStop") {
			t.Errorf("%s: the node DaemonSet has a preStop hook; the node drains itself at SIGTERM", tc.name)
		}
		for _, want := range []string{"- name: LIZARD_NODE_NAME", "- name: LIZARD_CLUSTER_SECRET", "--undrain-at-start=$(LIZARD_FLAG_UNDRAIN_AT_START)"} {
			if !strings.Contains(ds, want) {
				t.Errorf("%s: the node DaemonSet lacks %q, which the drain needs", tc.name, want)
			}
		}
		if !strings.Contains(ds, "terminationGracePeriodSeconds: 600") {
			t.Errorf("%s: the node pods' grace period is not the 600 s a drain may take", tc.name)
		}
	}
}
