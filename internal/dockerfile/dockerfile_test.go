package dockerfile

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/recipe"
)

// TestBoundsMatchRecipe: the bounds counted here are the recipe's, which
// the server checks.
func TestBoundsMatchRecipe(t *testing.T) {
	if MaxFileBytes != recipe.MaxFileBytes || MaxFiles != recipe.MaxFiles {
		t.Errorf("MaxFileBytes %d, MaxFiles %d; want the recipe's %d, %d", MaxFileBytes, MaxFiles, recipe.MaxFileBytes, recipe.MaxFiles)
	}
}

func TestParse(t *testing.T) {
	src := "# syntax=docker/dockerfile:1\n" +
		"# a comment\n" +
		"FROM interpreter AS base\n" +
		"RUN apt-get update && \\\n" +
		"    # a comment inside\n" +
		"\n" +
		"    echo done\n" +
		"RUN [\"echo\", \"a b\"]\n" +
		"RUN [not json\n" +
		"COPY --chown=user:user a.txt b/ /dst/\n" +
		"env A=1 B=\"two words\"\n"
	ins, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Instruction{
		{Line: 3, Cmd: "FROM", Args: []string{"interpreter", "AS", "base"}},
		{Line: 4, Cmd: "RUN", Args: []string{"apt-get update &&     echo done"}},
		{Line: 8, Cmd: "RUN", Args: []string{"echo", "a b"}, JSON: true},
		{Line: 9, Cmd: "RUN", Args: []string{"[not json"}},
		{Line: 10, Cmd: "COPY", Flags: []string{"--chown=user:user"}, Args: []string{"a.txt", "b/", "/dst/"}},
		{Line: 11, Cmd: "ENV", Args: []string{"A=1", `B="two words"`}},
	}
	for i := range ins {
		ins[i].Raw = ""
	}
	if !reflect.DeepEqual(ins, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", ins, want)
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "x", "EMPTY": "", "P": "/bin"}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	for _, tt := range []struct{ in, want string }{
		{"$A", "x"}, {"${A}y", "xy"}, {"$Ay", ""}, {`\$A`, "$A"}, {"'$A'", "$A"}, {`"$A b"`, "x b"},
		{"${NOPE:-d}", "d"}, {"${EMPTY:-d}", "d"}, {"${EMPTY-d}", ""}, {"${NOPE-d}", "d"},
		{"${A:+alt}", "alt"}, {"${NOPE:+alt}", ""}, {"${EMPTY+alt}", "alt"},
		{"${NOPE:-${A}}", "x"}, {"/opt:$P", "/opt:/bin"}, {"a$", "a$"}, {"$1", "$1"},
	} {
		got, err := expand(tt.in, lookup)
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"${A", "${}", "${A/x/y}", `"open`} {
		if _, err := expand(bad, lookup); err == nil {
			t.Errorf("expand(%q) = nil error; want one", bad)
		}
	}
}

// context makes a build context of files (path: content; "->target" a
// symbolic link) and returns it opened.
func context(t *testing.T, files map[string]string) (*Context, string) {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := OpenContext(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, dir
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestConvert converts a Dockerfile with every supported instruction.
func TestConvert(t *testing.T) {
	c, _ := context(t, map[string]string{
		"app/main.py": "print(1)", "app/lib/util.py": "x = 1", "app/link": "->main.py", "app/secret.key": "k",
		"run.sh": "echo run", ".dockerignore": "**/*.key\n", "notes.txt": "n",
	})
	src := `# syntax=docker/dockerfile:1
ARG BASE=interpreter
FROM ${BASE}
ARG VERSION=1.0
ARG BASE
LABEL maintainer="me"
EXPOSE 8000
ENV APP_HOME=/srv/app \
    GREETING="hello world"
ENV PATH=$APP_HOME/bin:$PATH
WORKDIR $APP_HOME
COPY app/ ./
COPY --chown=user --chmod=0755 run.sh notes.txt bin/
ADD notes.txt /etc/notes-$VERSION
USER user
RUN echo "$VERSION from $BASE" > v.txt
RUN ["python3", "-c", "print('hi')"]
USER root
ENTRYPOINT ["python3"]
CMD ["-m", "http.server", "8000"]
`
	res, err := Convert([]byte(src), Options{Context: c, Templates: []string{"interpreter"}, BuildArgs: map[string]string{"VERSION": "2.0", "UNUSED": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Recipe
	want := []api.TemplateStep{
		{Env: map[string]string{"APP_HOME": "/srv/app", "GREETING": "hello world"}},
		{Env: map[string]string{"PATH": "/srv/app/bin:" + basePath}},
		{Workdir: "/srv/app"},
		{Copy: []api.TemplateFile{{Path: "/srv/app/lib/util.py", Content: b64("x = 1"), Mode: 0o644, Owner: "root"},
			{Path: "/srv/app/main.py", Content: b64("print(1)"), Mode: 0o644, Owner: "root"}}},
		{Symlink: &api.TemplateSymlink{Target: "main.py", Path: "/srv/app/link"}},
		{Copy: []api.TemplateFile{{Path: "/srv/app/bin/run.sh", Content: b64("echo run"), Mode: 0o755, Owner: "user"},
			{Path: "/srv/app/bin/notes.txt", Content: b64("n"), Mode: 0o755, Owner: "user"}}},
		{Copy: []api.TemplateFile{{Path: "/etc/notes-2.0", Content: b64("n"), Mode: 0o644, Owner: "root"}}},
		{User: "user"},
		{Run: &api.TemplateCommand{Cmd: "export BASE='interpreter' VERSION='2.0'\necho \"$VERSION from $BASE\" > v.txt"}},
		{Run: &api.TemplateCommand{Cmd: "export BASE='interpreter' VERSION='2.0'\n'python3' '-c' 'print('\\''hi'\\'')'"}},
		{User: "root"},
	}
	if r.Base != "interpreter" || res.Image != "" || !reflect.DeepEqual(r.Steps, want) {
		t.Errorf("Convert: base %q image %q steps\n%s\nwant\n%s", r.Base, res.Image, dump(r.Steps), dump(want))
	}
	if r.Start != "exec 'python3' '-m' 'http.server' '8000'" {
		t.Errorf("start = %q", r.Start)
	}
	if len(res.Ignored) != 3 || !strings.Contains(strings.Join(res.Ignored, "\n"), "--build-arg UNUSED") {
		t.Errorf("ignored = %q; want LABEL, EXPOSE and the unused build arg", res.Ignored)
	}
	// The recipe passes the server's checks.
	if err := recipe.Validate(&r, []string{"interpreter"}); err != nil {
		t.Errorf("the converted recipe is refused: %v", err)
	}
}

func dump(steps []api.TemplateStep) string {
	var b strings.Builder
	for _, s := range steps {
		j, _ := json.Marshal(s)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestStart: ENTRYPOINT and CMD combined as Docker does.
func TestStart(t *testing.T) {
	for _, tt := range []struct{ lines, want string }{
		{"CMD python3 app.py", "python3 app.py"},
		{`CMD ["python3", "app.py"]`, "exec 'python3' 'app.py'"},
		{"ENTRYPOINT [\"node\"]\nCMD [\"server.js\"]", "exec 'node' 'server.js'"},
		{"ENTRYPOINT [\"tini\", \"--\"]\nCMD npm start", "exec 'tini' '--' '/bin/sh' '-c' 'npm start'"},
		{"ENTRYPOINT ./serve\nCMD [\"ignored\"]", "./serve"},
		{"CMD [\"a\"]\nCMD [\"b\"]", "exec 'b'"},
		{"RUN true", ""},
	} {
		res, err := Convert([]byte("FROM interpreter\n"+tt.lines+"\n"), Options{Templates: []string{"interpreter"}})
		if err != nil || res.Recipe.Start != tt.want {
			t.Errorf("%q: start %q, %v; want %q", tt.lines, res.Recipe.Start, err, tt.want)
		}
	}
}

// TestConvertErrors: what Lizard cannot honour, and hostile input, is an
// invalid argument naming the line.
func TestConvertErrors(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	c, dir := context(t, map[string]string{"a.txt": "a", "out": "->" + outside, "outfile": "->" + filepath.Join(outside, "secret"),
		"dir/escape": "->../../../../../../etc/passwd", "big/1": strings.Repeat("x", 9<<20), "big/2": strings.Repeat("x", 9<<20)})
	os.MkdirAll(filepath.Join(dir, "fifo"), 0o755)
	nested := "FROM interpreter\nRUN echo " + strings.Repeat("a \\\n", 40000) + "\n"
	tests := []struct{ name, src, want string }{
		{"second FROM", "FROM interpreter\nRUN true\nFROM interpreter\n", "line 3: a second FROM"},
		{"COPY --from", "FROM interpreter\nCOPY --from=build /a /b\n", "line 2: COPY --from"},
		{"HEALTHCHECK", "FROM interpreter\n\nHEALTHCHECK CMD curl -f localhost\n", "line 3: HEALTHCHECK is not supported"},
		{"VOLUME", "FROM interpreter\nVOLUME /data\n", "line 2: VOLUME"},
		{"ONBUILD", "FROM interpreter\nONBUILD RUN x\n", "line 2: ONBUILD"},
		{"SHELL", "FROM interpreter\nSHELL [\"/bin/bash\", \"-c\"]\n", "line 2: SHELL"},
		{"STOPSIGNAL", "FROM interpreter\nSTOPSIGNAL SIGTERM\n", "line 2: STOPSIGNAL"},
		{"unknown", "FROM interpreter\nFROBNICATE x\n", "line 2: unknown instruction FROBNICATE"},
		{"before FROM", "RUN true\nFROM interpreter\n", "line 1: RUN before FROM"},
		{"no FROM", "ARG A=1\n", "has no FROM"},
		{"scratch", "FROM scratch\n", "FROM scratch"},
		{"other user", "FROM interpreter\nUSER www-data\n", "line 2: USER www-data"},
		{"chown other", "FROM interpreter\nCOPY --chown=1001 a.txt /a\n", "line 2: COPY --chown=1001"},
		{"RUN --mount", "FROM interpreter\nRUN --mount=type=cache,target=/x true\n", "line 2: RUN --mount"},
		{"heredoc", "FROM interpreter\nRUN <<EOF\necho\nEOF\n", "line 2: RUN with a here-document"},
		{"ADD URL", "FROM interpreter\nADD https://example.com/x.tgz /x\n", "line 2: ADD https://example.com/x.tgz: ADD of a URL"},
		{"ADD archive", "FROM interpreter\nADD a.tar.gz /x/\n", "line 2: ADD a.tar.gz: Lizard does not unpack"},
		{"unmatched quote", "FROM interpreter\nENV A=\"x\n", "line 2: ENV"},
		{"bad escape", "# escape=x\nFROM interpreter\n", "line 1: escape=x"},
		// Hostile: outside the context, however spelt.
		{"dot-dot", "FROM interpreter\nCOPY ../../etc/passwd /x\n", "line 2: COPY ../../etc/passwd: outside the build context"},
		{"absolute dot-dot", "FROM interpreter\nCOPY /../../etc/passwd /x\n", "outside the build context"},
		{"glob dot-dot", "FROM interpreter\nCOPY ../* /x/\n", "outside the build context"},
		{"link to a dir outside", "FROM interpreter\nCOPY out/secret /x\n", "line 2: COPY out/secret: outside the build context"},
		{"link to a file outside", "FROM interpreter\nCOPY outfile /x\n", "outside the build context"},
		{"missing", "FROM interpreter\nCOPY nope /x\n", "COPY nope: not in the build context"},
		{"too many bytes", "FROM interpreter\nCOPY big/ /big/\n", "more than 16 MiB"},
		{"huge line", "FROM interpreter\nRUN " + strings.Repeat("x", MaxLineBytes+1) + "\n", "line 2: the instruction is longer than"},
		{"deeply nested continuations", nested, "line 2: the instruction is longer than"},
		{"too big", strings.Repeat("#\n", MaxBytes), "at most 1048576 are read"},
		{"NUL", "FROM interpreter\x00\n", "NUL byte"},
		{"too many instructions", "FROM interpreter\n" + strings.Repeat("RUN true\n", MaxInstructions), "more than 1000 instructions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Convert([]byte(tt.src), Options{Context: c, Templates: []string{"interpreter"}})
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(errdefs.Message(err), tt.want) {
				t.Errorf("Convert = %v; want invalid, saying %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "host secret") {
				t.Errorf("the error shows a file outside the context: %v", err)
			}
		})
	}
}

// TestContextLinksStay: a symbolic link inside a copied directory is
// copied as a link, whatever it points at; it is never followed.
func TestContextLinksStay(t *testing.T) {
	c, _ := context(t, map[string]string{"dir/escape": "->../../../../../../etc/passwd", "dir/ok": "fine"})
	res, err := Convert([]byte("FROM interpreter\nCOPY dir /d\n"), Options{Context: c, Templates: []string{"interpreter"}})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Recipe.Steps
	if len(st) != 2 || len(st[0].Copy) != 1 || st[0].Copy[0].Path != "/d/ok" ||
		st[1].Symlink == nil || *st[1].Symlink != (api.TemplateSymlink{Target: "../../../../../../etc/passwd", Path: "/d/escape"}) {
		t.Errorf("steps %s; want /d/ok copied and /d/escape a link", dump(st))
	}
}

func TestDockerignore(t *testing.T) {
	c, _ := context(t, map[string]string{
		".dockerignore": "# comment\nnode_modules\n*.log\n!keep.log\nsecrets/**\ndocs/*.md\n",
		"a.py":          "a", "x.log": "x", "keep.log": "k", "node_modules/m/i.js": "m", "sub/node_modules/n.js": "n",
		"secrets/a/b": "s", "docs/r.md": "r", "docs/deep/r.md": "d",
	})
	entries, _, err := c.Entries(1, ".")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Rel)
	}
	want := []string{".dockerignore", "a.py", "docs/deep/r.md", "keep.log", "sub/node_modules/n.js"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries %v; want %v", got, want)
	}
	if _, _, err := c.Entries(3, "x.log"); err == nil || !strings.Contains(err.Error(), "line 3: COPY x.log: the build context's .dockerignore leaves it out") {
		t.Errorf("COPY of an ignored file = %v; want refused", err)
	}
}

// TestImageFrom: FROM an image is the recipe's base image.
func TestImageFrom(t *testing.T) {
	res, err := Convert([]byte("ARG TAG=3.12\nFROM --platform=linux/amd64 python:${TAG}-slim AS app\nRUN true\n"), Options{Templates: []string{"interpreter"}})
	if err != nil || res.Image != "python:3.12-slim" || res.Recipe.Base != "" {
		t.Errorf("Convert = %+v, %v; want the image python:3.12-slim", res, err)
	}
}
