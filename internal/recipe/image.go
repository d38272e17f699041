package recipe

// Templates built on an image (a recipe's from): the image, pulled and
// unpacked by package oci, is the build's root filesystem in place of a
// copy of a built-in base. The host then writes into that tree, which
// the image's author made, only through an os.Root (nothing it writes
// resolves a link that leaves the tree): Lizard's mount points, its
// settings file with what the image's config says, and the recipe's
// staged files. The recipe's files and commands run in the build
// sandbox as they do on a built-in base.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/oci"
)

// fromImage fills rootfs from the recipe's image (r.From, pinned by the
// control plane) in step name, then runs the recipe's steps.
func (bd *build) fromImage(ctx context.Context, name, rootfs string, nextName func() string) error {
	img, err := bd.b.cfg.Images.Pull(ctx, bd.r.From, pullAuth(bd.auth), rootfs, func(line string) { bd.logf("  %s", line) })
	if err != nil {
		if ctx.Err() != nil {
			return stepFailure(ctx, name, "")
		}
		if errors.Is(err, errdefs.ErrInvalid) {
			return &StepError{Step: name, Err: err} // the image's doing
		}
		return err
	}
	rep := img.Report
	bd.logf("pulled %s: %d layer(s), %d from the cache; %d files, %d MiB; left out %d device node(s) and FIFO(s) and %d set-id bit(s)",
		img.Digest, img.Layers, img.Cached, rep.Files, rep.Bytes>>20, rep.Special, rep.SetID)
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := prepareImage(root); err != nil {
		return &StepError{Step: name, Err: fmt.Errorf("preparing the image for Lizard: %w", err)}
	}
	if py, ok := linkPython(root); ok {
		bd.logf("  the image's %s has IPython: Python code runs in it (linked at /opt/lizard/venv/bin/python)", py)
	}
	settings := imageSettings(bd.r, bd.steps, img)
	if err := makeWorkdir(root, settings); err != nil {
		return &StepError{Step: name, Err: fmt.Errorf("making the working directory %s: %w", settings.Workdir, err)}
	}
	if len(bd.steps) == 0 {
		bd.next(nextName())
		return writeSettings(root, settings)
	}
	if err := root.MkdirAll(stageDir+"/files", 0o755); err != nil {
		return &StepError{Step: name, Err: fmt.Errorf("staging files: %w", err)}
	}
	// Copy step N's file J as files/N-J, as stageFiles does on a base.
	for n, st := range bd.steps {
		for j, f := range st.Copy {
			data, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return err
			}
			if err := root.WriteFile(fmt.Sprintf("%s/files/%d-%d", stageDir, n, j), data, 0o600); err != nil {
				return fmt.Errorf("staging files: %w", err)
			}
		}
	}
	// The settings go in once the build sandbox has ended: its agent
	// would read them, and start the template's start command in it.
	if err := bd.inBuildSandbox(ctx, rootfs, nextName); err != nil {
		return err
	}
	return writeSettings(root, settings)
}

// prepareImage makes what every template has and Lizard's runtime needs:
// the mount points of the agent and the CLI (an empty directory and an
// empty file, which runsc would otherwise make in the shared template)
// and /tmp; and it removes /etc/resolv.conf, which the runtime provides.
func prepareImage(root *os.Root) error {
	for _, d := range []string{"opt/lizard/bin", "usr/local/bin", "etc/lizard"} {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if fi, err := root.Lstat("tmp"); err != nil || !fi.IsDir() {
		root.RemoveAll("tmp")
		if err := root.Mkdir("tmp", 0o777); err != nil {
			return err
		}
	}
	if err := root.Chmod("tmp", 0o777|fs.ModeSticky); err != nil {
		return err
	}
	for _, f := range []string{"opt/lizard/bin/lizard-agent", "usr/local/bin/lizard"} {
		if err := root.RemoveAll(f); err != nil {
			return err
		}
		if err := root.WriteFile(f, nil, 0o755); err != nil {
			return err
		}
	}
	// An image's own settings file is not Lizard's: the build sandbox's
	// agent would run its start command.
	if err := root.RemoveAll("etc/lizard/template.json"); err != nil {
		return err
	}
	return root.RemoveAll("etc/resolv.conf")
}

// imageSettings are the image's ENV, WORKDIR, USER and ENTRYPOINT+CMD
// with the recipe's (its steps' env, workdir and user, its start and
// ready) over them.
func imageSettings(r api.TemplateRecipe, steps []api.TemplateStep, img oci.Image) Settings {
	own := settings(r, steps)
	s := Settings{Env: map[string]string{}, Workdir: path.Clean("/" + img.Workdir), Start: own.Start, Ready: own.Ready}
	if img.Workdir == "" {
		s.Workdir = ""
	}
	for _, kv := range img.Env {
		k, v, _ := strings.Cut(kv, "=")
		// The agent's own variables are Lizard's to set, not an image's.
		if envRe.MatchString(k) && !strings.HasPrefix(k, "LIZARD_") && !strings.ContainsRune(v, 0) {
			s.Env[k] = v
		}
	}
	maps.Copy(s.Env, own.Env)
	if own.Workdir != "" {
		s.Workdir = own.Workdir
	}
	if s.Start == "" {
		if argv := append(append([]string(nil), img.Entrypoint...), img.Cmd...); len(argv) > 0 {
			s.Start = "exec " + shellQuote(argv...)
		}
	}
	s.User, _, _ = strings.Cut(img.User, ":") // a user, not its group
	if own.User != "" {
		s.User = own.User
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	return s
}

// makeWorkdir makes s's working directory, the code user's, when it is
// missing.
func makeWorkdir(root *os.Root, s Settings) error {
	if s.Workdir != "" {
		if _, err := root.Lstat(strings.TrimPrefix(s.Workdir, "/")); errors.Is(err, fs.ErrNotExist) {
			if err := root.MkdirAll(strings.TrimPrefix(s.Workdir, "/"), 0o755); err != nil {
				return err
			}
			codeUser := s.User
			if codeUser == "" {
				codeUser = "user"
			}
			if uid, gid, ok := passwdEntry(root, codeUser); ok && os.Geteuid() == 0 {
				if err := root.Lchown(strings.TrimPrefix(s.Workdir, "/"), uid, gid); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeSettings writes s where the agent reads it.
func writeSettings(root *os.Root, s Settings) error {
	if err := root.MkdirAll("etc/lizard", 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := root.RemoveAll("etc/lizard/template.json"); err != nil {
		return err
	}
	return root.WriteFile("etc/lizard/template.json", append(b, '\n'), 0o644)
}

// passwdEntry finds user (a name or a uid) in the image's /etc/passwd.
func passwdEntry(root *os.Root, user string) (uid, gid int, ok bool) {
	b, err := root.ReadFile("etc/passwd")
	if err != nil || len(b) > 4<<20 {
		return 0, 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 4 || f[0] != user && f[2] != user {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		return uid, gid, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

// pythonPrefixes are where an image's python3 and its packages are: a
// python3 in bin/ and IPython in lib/python3*/site-packages (Debian's
// /usr also in lib/python3/dist-packages).
var pythonPrefixes = []string{"usr/local", "usr", "opt/conda"}

// linkPython makes /opt/lizard/venv/bin/python, where the agent starts
// Lizard's kernel, the image's python3 when that has IPython (the
// kernel's one need beyond the standard library, with traitlets, which
// IPython brings): such an image runs Python code with no step of the
// recipe's. An image that has the path already keeps its own.
func linkPython(root *os.Root) (string, bool) {
	const at = "opt/lizard/venv/bin/python"
	if _, err := root.Lstat(at); err == nil {
		return "", false
	}
	for _, prefix := range pythonPrefixes {
		if fi, err := root.Stat(prefix + "/bin/python3"); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		pats := []string{prefix + "/lib/python3*/site-packages/IPython"}
		if prefix == "usr" {
			pats = append(pats, "usr/lib/python3/dist-packages/IPython")
		}
		for _, pat := range pats {
			if m, _ := fs.Glob(root.FS(), pat); len(m) == 0 {
				continue
			}
			if root.MkdirAll(path.Dir(at), 0o755) != nil || root.Symlink("/"+prefix+"/bin/python3", at) != nil {
				return "", false
			}
			return "/" + prefix + "/bin/python3", true
		}
	}
	return "", false
}
