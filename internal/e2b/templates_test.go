package e2b_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/e2b"
	"github.com/lizard-build/lizard/internal/e2b/uploads"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/server"
)

// fakeBuilder builds nothing: it records the recipes it is given and
// answers as a build that emitted a step and a line of output.
type fakeBuilder struct {
	mu      sync.Mutex
	recipes []api.TemplateRecipe
	auths   []*api.RegistryAuth // of images resolved
	fail    error
}

// ResolveImage pins any image to one digest, as the builder pins an
// image's tag (control.ImageResolver).
func (f *fakeBuilder) ResolveImage(_ context.Context, ref string, auth *api.RegistryAuth) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auths = append(f.auths, auth)
	const digest = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	name, _, _ := strings.Cut(ref, ":")
	return name + "@" + digest, digest, nil
}

func (f *fakeBuilder) BaseKey(context.Context, string) (string, error) { return "basekey", nil }
func (f *fakeBuilder) Build(_ context.Context, _ string, r api.TemplateRecipe, key string, emit func(api.TemplateBuildEvent)) (recipe.Result, error) {
	f.mu.Lock()
	f.recipes = append(f.recipes, r)
	fail := f.fail
	f.mu.Unlock()
	emit(api.TemplateBuildEvent{Type: api.BuildEventStep, Step: 1, Total: 1, Name: "run: the steps"})
	emit(api.TemplateBuildEvent{Type: api.BuildEventLog, Text: "hello from the build"})
	if fail != nil {
		return recipe.Result{}, fail
	}
	return recipe.Result{Key: key, SizeBytes: 1, BuildMs: 1}, nil
}
func (f *fakeBuilder) Hold(string) error            { return nil }
func (f *fakeBuilder) Release(string) (bool, error) { return true, nil }

func (f *fakeBuilder) last() api.TemplateRecipe {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recipes[len(f.recipes)-1]
}

func newTemplateEnv(t *testing.T, b *fakeBuilder) *env {
	dir := t.TempDir()
	return newEnvLimits(t, nil, nil, server.KeyLimits{}, func(cc *control.Config, ec *e2b.Config) {
		cc.Builder = b
		ec.Dir = dir
		ec.Uploads = uploads.DefaultLimits
		ec.Uploads.MaxBytes = 64 << 10
	})
}

// tgz is a gzipped tar of files (name → content; a name ending in / is a
// directory, "->target" content a symbolic link), in the order given.
func tgz(t *testing.T, files ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := tar.NewWriter(zw)
	for i := 0; i+1 < len(files); i += 2 {
		name, body := files[i], files[i+1]
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(body))}
		switch {
		case strings.HasSuffix(name, "/"):
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(body, "->"):
			h.Typeflag, h.Mode, h.Size, h.Linkname = tar.TypeSymlink, 0o777, 0, body[2:]
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			w.Write([]byte(body))
		}
	}
	w.Close()
	zw.Close()
	return buf.Bytes()
}

// hashOf is the SDK's files hash of the archive for copy(src, dest).
func hashOf(t *testing.T, archive []byte, src, dest string) string {
	t.Helper()
	st, err := uploads.Open(t.TempDir(), uploads.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	const h = "0000000000000000000000000000000000000000000000000000000000000000"
	if err := st.Put("p", h, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	entries, err := st.Read("p", h)
	if err != nil {
		t.Fatal(err)
	}
	return uploads.FilesHash(src, dest, entries)
}

// upload asks for hash's upload link as key and PUTs archive to it,
// returning the PUT's status (0: the files were present).
func (e *env) upload(t *testing.T, key, hash string, archive []byte) int {
	t.Helper()
	r := e.do(t, "GET", "/e2b/templates/any/files/"+hash, "", "X-API-Key", key)
	if r.status != http.StatusCreated {
		t.Fatalf("files link: %d %s", r.status, r.body)
	}
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	json.Unmarshal([]byte(r.body), &link)
	if link.Present {
		return 0
	}
	req, _ := http.NewRequest("PUT", link.URL, bytes.NewReader(archive))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

type buildInfo struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Tags       []string `json:"tags"`
}

func (e *env) requestBuild(t *testing.T, key, name string) buildInfo {
	t.Helper()
	r := e.do(t, "POST", "/e2b/v3/templates", fmt.Sprintf(`{"name":%q}`, name), "X-API-Key", key)
	if r.status != http.StatusAccepted {
		t.Fatalf("request build: %d %s", r.status, r.body)
	}
	var bi buildInfo
	json.Unmarshal([]byte(r.body), &bi)
	return bi
}

type buildStatus struct {
	Status     string `json:"status"`
	LogEntries []struct {
		Message string `json:"message"`
		Level   string `json:"level"`
	} `json:"logEntries"`
	Reason *struct {
		Message string `json:"message"`
	} `json:"reason"`
}

// waitBuild polls a build's status until it ends, with every log entry.
func (e *env) waitBuild(t *testing.T, key string, bi buildInfo) (buildStatus, []string) {
	t.Helper()
	var logs []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.do(t, "GET", fmt.Sprintf("/e2b/templates/%s/builds/%s/status?logsOffset=%d", bi.TemplateID, bi.BuildID, len(logs)), "", "X-API-Key", key)
		var st buildStatus
		if err := json.Unmarshal([]byte(r.body), &st); err != nil || r.status != http.StatusOK {
			t.Fatalf("status: %d %s", r.status, r.body)
		}
		for _, l := range st.LogEntries {
			logs = append(logs, l.Message)
		}
		if (st.Status == "ready" || st.Status == "error") && len(st.LogEntries) == 0 {
			return st, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("build still %s after 10 s", st.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTemplateBuild: E2B's Template SDK's calls in order — request a
// build, upload a copy's files at the signed link, start it with steps,
// poll its status and log — become a Lizard build of the recipe the
// steps say; the template then exists, has its tag, and sandboxes are
// created from it by name and by name:tag.
func TestTemplateBuild(t *testing.T) {
	b := &fakeBuilder{}
	e := newTemplateEnv(t, b)
	key := e.key1
	archive := tgz(t, "folder/", "", "folder/a.txt", "hello", "folder/link.txt", "->a.txt", "folder/empty/", "")
	hash := hashOf(t, archive, "folder/*", "data/")
	bi := e.requestBuild(t, key, "my-tpl:v1")
	if bi.TemplateID != "my-tpl" || len(bi.BuildID) != 36 || strings.Join(bi.Tags, ",") != "v1" {
		t.Fatalf("request: %+v; want my-tpl, a UUID, tag v1", bi)
	}
	if st := e.upload(t, key, hash, archive); st != http.StatusOK {
		t.Fatalf("upload: %d", st)
	}
	if st := e.upload(t, key, hash, archive); st != 0 {
		t.Fatalf("the second upload link: %d, want present", st)
	}
	steps := fmt.Sprintf(`{"fromTemplate":"base","force":true,"startCmd":"python -m http.server 8000","readyCmd":"sleep 1","steps":[
		{"type":"COPY","args":["folder/*","data/","",""],"filesHash":%q},
		{"type":"RUN","args":["cat data/a.txt"]},
		{"type":"ENV","args":["A","1","B","two"]},
		{"type":"RUN","args":["apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y --no-install-recommends sqlite3 jq","root"]},
		{"type":"RUN","args":["pip install six==1.16.0","root"]},
		{"type":"RUN","args":["ln -s -f .bashrc .bashrc.local"]},
		{"type":"RUN","args":["npm install -g typescript@5 @types/node","root"]},
		{"type":"RUN","args":["bun install --dev lodash"]},
		{"type":"WORKDIR","args":["app"]},
		{"type":"USER","args":["root"]},
		{"type":"RUN","args":["whoami"]}]}`, hash)
	if r := e.do(t, "POST", "/e2b/v2/templates/my-tpl/builds/"+bi.BuildID, steps, "X-API-Key", key); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/e2b/v2/templates/my-tpl/builds/"+bi.BuildID, steps, "X-API-Key", key); r.status != http.StatusConflict {
		t.Errorf("starting it again: %d %s, want 409", r.status, r.body)
	}
	st, logs := e.waitBuild(t, key, bi)
	if st.Status != "ready" || !strings.Contains(strings.Join(logs, "\n"), "hello from the build") {
		t.Fatalf("status %s, logs %q; want ready with the build's output", st.Status, logs)
	}
	got, _ := json.Marshal(b.last().Steps)
	content := base64.StdEncoding.EncodeToString([]byte("hello"))
	want := `[{"user":"user"},{"workdir":"/home/user"},` +
		`{"run":{"cmd":"mkdir -p '/home/user/data/empty' \u0026\u0026 chown user:user '/home/user/data/empty'","user":"root"}},` +
		`{"copy":[{"path":"/home/user/data/a.txt","content":"` + content + `","mode":420,"owner":"user","size":5}]},` +
		`{"symlink":{"target":"a.txt","path":"/home/user/data/link.txt"}},` +
		`{"run":{"cmd":"cat data/a.txt","user":"user"}},{"env":{"A":"1","B":"two"}},{"apt":["sqlite3","jq"]},{"pip":["six==1.16.0"]},` +
		`{"run":{"cmd":"ln -s -f .bashrc .bashrc.local","user":"user"}},` +
		`{"npm":{"packages":["typescript@5","@types/node"],"global":true}},{"npm":{"packages":["lodash"],"dev":true}},{"workdir":"/app"},{"user":"root"},{"run":{"cmd":"whoami","user":"root"}}]`
	if string(got) != want {
		t.Errorf("steps:\n%s\nwant\n%s", got, want)
	}
	if r := b.last(); r.Base != "interpreter" || r.Start != "python -m http.server 8000" || r.Ready != "sleep 1" {
		t.Errorf("recipe base %q, start %q, ready %q", r.Base, r.Start, r.Ready)
	}
	for alias, want := range map[string]int{"my-tpl": 200, "my-tpl:v1": 200, "my-tpl:default": 200, "my-tpl:v2": 404, "base": 200, "code-interpreter-v1": 200, "nope": 404} {
		if r := e.do(t, "GET", "/e2b/templates/aliases/"+alias, "", "X-API-Key", key); r.status != want {
			t.Errorf("exists(%s): %d %s, want %d", alias, r.status, r.body, want)
		}
	}
	if r := e.do(t, "GET", "/e2b/templates/aliases/my-tpl", "", "X-API-Key", e.key2); r.status != http.StatusNotFound {
		t.Errorf("another project's exists(my-tpl): %d, want 404", r.status)
	}
	// Tags: given, listed, assigned, named by a create, removed.
	if r := e.do(t, "POST", "/e2b/templates/tags", `{"target":"my-tpl:v1","tags":["prod"]}`, "X-API-Key", key); r.status != http.StatusCreated || !strings.Contains(r.body, bi.BuildID) {
		t.Errorf("assign tags: %d %s, want 201 with build %s", r.status, r.body, bi.BuildID)
	}
	r := e.do(t, "GET", "/e2b/templates/my-tpl/tags", "", "X-API-Key", key)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"tag":"prod"`) || !strings.Contains(r.body, `"tag":"v1"`) {
		t.Errorf("tags: %d %s, want prod and v1", r.status, r.body)
	}
	for _, tpl := range []string{"my-tpl", "my-tpl:prod"} {
		if r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"`+tpl+`"}`, "X-API-Key", key); r.status != http.StatusCreated || !strings.Contains(r.body, `"templateID":"my-tpl"`) {
			t.Errorf("create from %s: %d %s", tpl, r.status, r.body)
		}
	}
	if r := e.do(t, "DELETE", "/e2b/templates/tags", `{"name":"my-tpl","tags":["prod"]}`, "X-API-Key", key); r.status != http.StatusNoContent {
		t.Errorf("remove tags: %d %s", r.status, r.body)
	}
	if r := e.do(t, "POST", "/e2b/v2/sandboxes", `{"templateID":"my-tpl:prod"}`, "X-API-Key", key); r.status != http.StatusNotFound {
		t.Errorf("create from a removed tag: %d %s, want 404", r.status, r.body)
	}
	// Another project sees none of it.
	if r := e.do(t, "GET", fmt.Sprintf("/e2b/templates/my-tpl/builds/%s/status", bi.BuildID), "", "X-API-Key", e.key2); r.status != http.StatusNotFound {
		t.Errorf("another project's status: %d, want 404", r.status)
	}
}

// TestTemplateBuildFails: a build that fails ends in E2B's error status
// with the reason and the failing step's output.
func TestTemplateBuildFails(t *testing.T) {
	b := &fakeBuilder{fail: &recipe.StepError{Step: "run: false", Err: fmt.Errorf("exit status 1"), Log: "it went wrong\n"}}
	e := newTemplateEnv(t, b)
	bi := e.requestBuild(t, e.key1, "bad")
	if r := e.do(t, "POST", "/e2b/v2/templates/bad/builds/"+bi.BuildID, `{"steps":[{"type":"RUN","args":["false"]}]}`, "X-API-Key", e.key1); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	st, _ := e.waitBuild(t, e.key1, bi)
	if st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, `"run: false"`) {
		t.Fatalf("status %+v; want error naming the step", st)
	}
}

// TestTemplateCopyOfDirectoriesUnchecked: a copy holding directories,
// hashed as E2B's JavaScript SDK hashes them (with each directory's size
// on the user's disk, which no tar records), is built from the files
// uploaded; one of files alone under a hash they do not have is refused
// (TestTemplateBuildRefused).
func TestTemplateCopyOfDirectoriesUnchecked(t *testing.T) {
	b := &fakeBuilder{}
	e := newTemplateEnv(t, b)
	archive := tgz(t, "tree/", "", "tree/sub/", "", "tree/sub/b.txt", "bee", "tree/empty/", "")
	jsHash := func(src, dest string) string {
		// The JavaScript SDK's calculateFilesHash on ext4.
		h := sha256.New()
		io.WriteString(h, "COPY "+src+" "+dest)
		for _, f := range []struct{ name, mode, size, body string }{
			{"tree", "16877", "4096", ""}, {"tree/empty", "16877", "4096", ""}, {"tree/sub", "16877", "4096", ""}, {"tree/sub/b.txt", "33188", "3", "bee"},
		} {
			io.WriteString(h, f.name+f.mode+f.size+f.body)
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	hash := jsHash("tree", "/opt/tree")
	if hash == hashOf(t, archive, "tree", "/opt/tree") {
		t.Fatal("the JavaScript SDK's hash is the server's: the test checks nothing")
	}
	if st := e.upload(t, e.key1, hash, archive); st != http.StatusOK {
		t.Fatalf("upload: %d", st)
	}
	bi := e.requestBuild(t, e.key1, "dirs")
	body := fmt.Sprintf(`{"steps":[{"type":"COPY","args":["tree","/opt/tree","root",""],"filesHash":%q}]}`, hash)
	if r := e.do(t, "POST", "/e2b/v2/templates/dirs/builds/"+bi.BuildID, body, "X-API-Key", e.key1); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s; want 202", r.status, r.body)
	}
	if st, _ := e.waitBuild(t, e.key1, bi); st.Status != "ready" {
		t.Fatalf("status %+v", st)
	}
	got, _ := json.Marshal(b.last().Steps[2:])
	want := `[{"run":{"cmd":"mkdir -p '/opt/tree/sub' '/opt/tree/empty'","user":"root"}},` +
		`{"copy":[{"path":"/opt/tree/sub/b.txt","content":"YmVl","mode":420,"owner":"root","size":3}]}]`
	if string(got) != want {
		t.Errorf("steps:\n%s\nwant\n%s", got, want)
	}
}

// TestTemplateBuildRefused: what the surface refuses before a build —
// each an E2B error naming why, nothing built.
func TestTemplateBuildRefused(t *testing.T) {
	b := &fakeBuilder{}
	e := newTemplateEnv(t, b)
	archive := tgz(t, "a.txt", "hello")
	hash := hashOf(t, archive, "a.txt", "/a.txt")
	if st := e.upload(t, e.key1, hash, archive); st != http.StatusOK {
		t.Fatalf("upload: %d", st)
	}
	// The same files under another hash: a hash that does not match.
	liar := strings.Repeat("ab", 32)
	if st := e.upload(t, e.key1, liar, archive); st != http.StatusOK {
		t.Fatalf("upload: %d", st)
	}
	copyStep := func(h string) string {
		return fmt.Sprintf(`{"steps":[{"type":"COPY","args":["a.txt","/a.txt"],"filesHash":%q}]}`, h)
	}
	for _, c := range []struct {
		name, key, body string
		status          int
		msg             string
	}{
		{"a hash that does not match the files", e.key1, copyStep(liar), 400, "do not match its hash"},
		{"another project's upload", e.key2, copyStep(hash), 400, "no files uploaded"},
		{"npm_install of a URL", e.key1, `{"steps":[{"type":"RUN","args":["npm install -g https://evil.test/x.tgz","root"]}]}`, 400, `recipe.steps[2].npm.packages \"https://evil.test/x.tgz\": want a registry package`},
		{"npm_install from git", e.key1, `{"steps":[{"type":"RUN","args":["npm install github:user/repo"]}]}`, 400, "no URLs, paths, git or aliases"},
		{"a user Lizard has not", e.key1, `{"steps":[{"type":"RUN","args":["whoami","root123"]}]}`, 400, `step 1 (RUN whoami root123): failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123': a Lizard sandbox has two users`},
		{"an AWS registry", e.key1, `{"fromImage":"1.dkr.ecr.test/app:1","fromImageRegistry":{"type":"aws","awsAccessKeyId":"a","awsSecretAccessKey":"s","awsRegion":"r"},"steps":[]}`, 501, "from_aws_registry"},
		{"a GCP key that is not JSON", e.key1, `{"fromImage":"gcr.test/app:1","fromImageRegistry":{"type":"gcp","serviceAccountJson":"path/to/key.json"},"steps":[]}`, 400, "from_gcp_registry: the service account's JSON key"},
		{"a registry without a password", e.key1, `{"fromImage":"reg.test/app:1","fromImageRegistry":{"type":"registry","username":"u"},"steps":[]}`, 400, "username and password"},
		{"a base template the project has not", e.key1, `{"fromTemplate":"other","steps":[]}`, 400, `template \"other\" not found in project p1; build it first`},
		{"a tag of a base template", e.key1, `{"fromTemplate":"other:v2","steps":[]}`, 400, "not on a tag of it"},
		{"a step E2B has not", e.key1, `{"steps":[{"type":"HEALTHCHECK","args":["x"]}]}`, 400, "HEALTHCHECK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bi := e.requestBuild(t, c.key, "tpl")
			r := e.do(t, "POST", "/e2b/v2/templates/tpl/builds/"+bi.BuildID, c.body, "X-API-Key", c.key)
			if r.status != c.status || !strings.Contains(r.body, c.msg) {
				t.Errorf("start: %d %s; want %d saying %q", r.status, r.body, c.status, c.msg)
			}
			if r := e.do(t, "GET", fmt.Sprintf("/e2b/templates/tpl/builds/%s/status", bi.BuildID), "", "X-API-Key", c.key); !strings.Contains(r.body, `"status":"error"`) {
				t.Errorf("status after a refused start: %s, want error", r.body)
			}
		})
	}
	if n := len(b.recipes); n != 0 {
		t.Errorf("%d builds ran, want none", n)
	}
	// Uploads: a tar climbing out, one over the bound, a wrong or an
	// expired signature.
	if st := e.upload(t, e.key1, strings.Repeat("cd", 32), tgz(t, "../../etc/passwd", "x")); st != http.StatusBadRequest {
		t.Errorf("a tar with ../: %d, want 400", st)
	}
	big := make([]byte, 100<<10)
	for i := range big {
		big[i] = byte(i * 7919 >> 3) // incompressible enough
	}
	if st := e.upload(t, e.key1, strings.Repeat("ef", 32), tgz(t, "big", string(big))); st != http.StatusRequestEntityTooLarge {
		t.Errorf("an upload over the bound: %d, want 413", st)
	}
	r := e.do(t, "GET", "/e2b/templates/x/files/"+strings.Repeat("12", 32), "", "X-API-Key", e.key1)
	var link struct{ URL string }
	json.Unmarshal([]byte(r.body), &link)
	for name, url := range map[string]string{
		"a wrong signature":        strings.Replace(link.URL, "signature=", "signature=00", 1),
		"another project's path":   strings.Replace(link.URL, "/p1/", "/p2/", 1),
		"another hash":             strings.Replace(link.URL, strings.Repeat("12", 32), strings.Repeat("34", 32), 1),
		"an expiry moved too late": strings.Replace(link.URL, "expires=1", "expires=9", 1),
	} {
		req, _ := http.NewRequest("PUT", url, bytes.NewReader(archive))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("PUT with %s: %d, want 401", name, resp.StatusCode)
		}
	}
	// A status nobody requested, another project's build.
	if r := e.do(t, "GET", "/e2b/templates/tpl/builds/00000000-0000-4000-8000-000000000000/status", "", "X-API-Key", e.key1); r.status != http.StatusNotFound {
		t.Errorf("status of no build: %d, want 404", r.status)
	}
}

// TestTemplateFromImage: from_image (and from_dockerfile's FROM) is the
// recipe's from, pinned by the builder; from_image's username and
// password pull it, and are in no answer.
func TestTemplateFromImage(t *testing.T) {
	b := &fakeBuilder{}
	e := newTemplateEnv(t, b)
	bi := e.requestBuild(t, e.key1, "on-image")
	start := `{"fromImage":"reg.test/app:1","fromImageRegistry":{"type":"registry","username":"u","password":"secret-pw"},"steps":[{"type":"RUN","args":["id -un"]}]}`
	if r := e.do(t, "POST", "/e2b/v2/templates/on-image/builds/"+bi.BuildID, start, "X-API-Key", e.key1); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	st, logs := e.waitBuild(t, e.key1, bi)
	if st.Status != "ready" {
		t.Fatalf("status %+v", st)
	}
	if r := b.last(); !strings.HasPrefix(r.From, "reg.test/app@sha256:") || r.Base != "" {
		t.Errorf("recipe from %q base %q; want the image pinned, no built-in base", r.From, r.Base)
	} else if len(r.Steps) < 2 || r.Steps[0].Run == nil || r.Steps[0].Run.User != "root" || !strings.Contains(r.Steps[0].Run.Cmd, "useradd -m -u 1000") || r.Steps[1].User != "user" {
		t.Errorf("steps %+v; want E2B's default user made in the image first, then taken", r.Steps)
	}
	if len(b.auths) != 1 || b.auths[0] == nil || *b.auths[0] != (api.RegistryAuth{Username: "u", Password: "secret-pw"}) {
		t.Errorf("the image was resolved with %+v; want u and its password", b.auths)
	}
	r := e.do(t, "GET", "/e2b/templates/aliases/on-image", "", "X-API-Key", e.key1)
	if r.status != http.StatusOK || strings.Contains(strings.Join(logs, " ")+r.body, "secret-pw") {
		t.Errorf("exists: %d %s; the password must be in no answer or log (%q)", r.status, r.body, logs)
	}
}
