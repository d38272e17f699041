package dockerfile

import (
	"encoding/base64"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
)

// Options say how a Dockerfile is converted.
type Options struct {
	// BuildArgs are --build-arg values: they win over ARG defaults.
	BuildArgs map[string]string
	// Context is the build context COPY and ADD read; nil refuses them.
	Context *Context
	// Templates are the Lizard templates FROM may name (the built-in
	// ones); any other FROM names an image.
	Templates []string
}

// Result is a converted Dockerfile.
type Result struct {
	Recipe api.TemplateRecipe
	// Image is what FROM named when it is not a Lizard template: an
	// image reference, the recipe's base image.
	Image string
	// Ignored says what was read and left out (LABEL, EXPOSE,
	// MAINTAINER, unused build args), one line each.
	Ignored []string
}

// Convert turns Dockerfile data into a recipe of ordered steps.
func Convert(data []byte, opts Options) (Result, error) {
	ins, err := Parse(data)
	if err != nil {
		return Result{}, err
	}
	cv := &converter{opts: opts, global: map[string]string{}, args: map[string]string{}, env: map[string]string{}, workdir: "/", used: map[string]bool{}}
	for _, in := range ins {
		if err := cv.instruction(in); err != nil {
			return Result{}, err
		}
	}
	if !cv.from {
		return Result{}, errorf(max(1, len(ins)), "the Dockerfile has no FROM: name its base, such as FROM interpreter (a Lizard template) or an image")
	}
	cv.res.Recipe.Start = cv.start()
	for _, k := range sortedKeys(opts.BuildArgs) {
		if !cv.used[k] {
			cv.res.Ignored = append(cv.res.Ignored, fmt.Sprintf("--build-arg %s: no ARG %s in the Dockerfile", k, k))
		}
	}
	return cv.res, nil
}

// converter is one conversion under way.
type converter struct {
	opts   Options
	res    Result
	from   bool
	global map[string]string // ARGs before FROM: for FROM only
	args   map[string]string // ARGs of the stage
	env    map[string]string // ENVs so far
	used   map[string]bool   // build args an ARG declared
	// workdir resolves relative paths; entrypoint and cmd make the start
	// command (exec form: its words; shell form: one string, shell true).
	workdir          string
	entrypoint, cmd  []string
	epShell, cmdExec bool
	hasEntrypoint    bool
}

func (cv *converter) step(s api.TemplateStep) { cv.res.Recipe.Steps = append(cv.res.Recipe.Steps, s) }

// basePath is the PATH of code in a sandbox of a Lizard template (and
// Docker's default for an image without one), so that the common
// ENV PATH=/opt/tool/bin:$PATH keeps the rest.
const basePath = "/opt/lizard/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookup is a variable's value for substitution: an ENV wins over an ARG.
func (cv *converter) lookup(name string) (string, bool) {
	if v, ok := cv.env[name]; ok {
		return v, true
	}
	if v, ok := cv.args[name]; ok {
		return v, true
	}
	if name == "PATH" {
		return basePath, true
	}
	return "", false
}

func (cv *converter) expand(in Instruction, w string) (string, error) {
	v, err := expand(w, cv.lookup)
	if err != nil {
		return "", errorf(in.Line, "%s: %v", in.Cmd, err)
	}
	return v, nil
}

// Instructions Lizard cannot honour, and what to do instead.
var unsupported = map[string]string{
	"HEALTHCHECK": "Lizard checks a template once, at boot: give the check as the template's ready command (lizard template build --ready CMD)",
	"VOLUME":      "a sandbox's disk is its own; mount a Lizard volume at create (docs/volumes.md)",
	"ONBUILD":     "a template is not built on by other Dockerfiles",
	"SHELL":       "RUN steps run by /bin/sh -ec; call another shell inside the command",
	"STOPSIGNAL":  "sandboxes are not stopped by a signal to their start command",
}

func (cv *converter) instruction(in Instruction) error {
	if !cv.from && in.Cmd != "FROM" && in.Cmd != "ARG" {
		return errorf(in.Line, "%s before FROM: only ARG may come before FROM", in.Cmd)
	}
	if why, ok := unsupported[in.Cmd]; ok {
		return errorf(in.Line, "%s is not supported: %s", in.Cmd, why)
	}
	switch in.Cmd {
	case "FROM":
		return cv.fromInstruction(in)
	case "ARG":
		return cv.arg(in)
	case "RUN":
		return cv.run(in)
	case "COPY", "ADD":
		return cv.copy(in)
	case "ENV":
		return cv.envInstruction(in)
	case "WORKDIR":
		if len(in.Args) != 1 {
			return errorf(in.Line, "WORKDIR takes one path")
		}
		p, err := cv.expand(in, in.Args[0])
		if err != nil {
			return err
		}
		cv.workdir = path.Join(cv.workdir, p)
		if path.IsAbs(p) {
			cv.workdir = path.Clean(p)
		}
		cv.step(api.TemplateStep{Workdir: cv.workdir})
	case "USER":
		if len(in.Args) != 1 {
			return errorf(in.Line, "USER takes one user")
		}
		u, err := cv.expand(in, in.Args[0])
		if err != nil {
			return err
		}
		who, ok := lizardUser(u)
		if !ok {
			return errorf(in.Line, "USER %s: Lizard runs commands and code as root or user (uid 1000); run as another user with su or setpriv inside a RUN", u)
		}
		cv.step(api.TemplateStep{User: who})
	case "CMD", "ENTRYPOINT":
		words, shell := in.Args, !in.JSON
		if in.Cmd == "CMD" {
			cv.cmd, cv.cmdExec = words, !shell
		} else {
			cv.entrypoint, cv.epShell, cv.hasEntrypoint = words, shell, len(words) > 0
		}
	case "EXPOSE":
		cv.res.Ignored = append(cv.res.Ignored, fmt.Sprintf("line %d: %s (every port a sandbox listens on is reachable: docs/ports.md)", in.Line, in.Raw))
	case "LABEL", "MAINTAINER":
		cv.res.Ignored = append(cv.res.Ignored, fmt.Sprintf("line %d: %s", in.Line, firstLine(in.Raw)))
	default:
		return errorf(in.Line, "unknown instruction %s", in.Cmd)
	}
	return nil
}

func (cv *converter) fromInstruction(in Instruction) error {
	if cv.from {
		return errorf(in.Line, "a second FROM: multi-stage builds are not supported; build one stage (copy what an earlier stage built from the build context)")
	}
	for _, f := range in.Flags {
		if f != "--platform=linux/amd64" && f != "--platform=$BUILDPLATFORM" && f != "--platform=$TARGETPLATFORM" {
			return errorf(in.Line, "FROM %s: only --platform=linux/amd64 is supported", f)
		}
	}
	if len(in.Args) != 1 && (len(in.Args) != 3 || !strings.EqualFold(in.Args[1], "AS")) {
		return errorf(in.Line, "FROM takes an image or a Lizard template, optionally AS name")
	}
	cv.from = true
	base, err := expand(in.Args[0], func(n string) (string, bool) { v, ok := cv.global[n]; return v, ok })
	if err != nil {
		return errorf(in.Line, "FROM: %v", err)
	}
	switch {
	case base == "":
		return errorf(in.Line, "FROM names nothing (an ARG without a value?)")
	case base == "scratch":
		return errorf(in.Line, "FROM scratch: a template needs a root filesystem to boot; start FROM interpreter or an image")
	case slices.Contains(cv.opts.Templates, base):
		cv.res.Recipe.Base = base
	default:
		cv.res.Image = base
	}
	return nil
}

func (cv *converter) arg(in Instruction) error {
	if len(in.Args) == 0 {
		return errorf(in.Line, "ARG takes a name, optionally =default")
	}
	for _, w := range in.Args {
		name, def, hasDef := strings.Cut(w, "=")
		if !validName(name) {
			return errorf(in.Line, "ARG %s: a name is letters, digits and _", name)
		}
		val, given := cv.opts.BuildArgs[name]
		if given {
			cv.used[name] = true
		}
		if !cv.from {
			if !given && hasDef {
				var err error
				if val, err = expand(def, func(n string) (string, bool) { v, ok := cv.global[n]; return v, ok }); err != nil {
					return errorf(in.Line, "ARG: %v", err)
				}
			}
			if given || hasDef {
				cv.global[name] = val
			}
			continue
		}
		if !given {
			if hasDef {
				var err error
				if val, err = cv.expand(in, def); err != nil {
					return err
				}
			} else if g, ok := cv.global[name]; ok {
				val, given = g, true // a global ARG redeclared in the stage
			} else {
				continue // declared without a value: unset
			}
		}
		cv.args[name] = val
	}
	return nil
}

func validName(n string) bool {
	for i := 0; i < len(n); i++ {
		if !isNameByte(n[i], i == 0) {
			return false
		}
	}
	return n != ""
}

func (cv *converter) run(in Instruction) error {
	if len(in.Flags) > 0 {
		return errorf(in.Line, "RUN %s is not supported: a RUN step runs in the build sandbox, without mounts or network", in.Flags[0])
	}
	if len(in.Args) == 0 {
		return errorf(in.Line, "RUN takes a command")
	}
	cmd := in.Args[0]
	if in.JSON {
		cmd = shellQuote(in.Args...)
	} else if strings.HasPrefix(strings.TrimSpace(cmd), "<<") {
		return errorf(in.Line, "RUN with a here-document is not supported: put the script in the build context, COPY it and RUN it")
	}
	// The stage's ARGs are in a RUN's environment, not the template's
	// (Docker's rule); an ENV of the same name wins.
	var exports []string
	for _, k := range sortedKeys(cv.args) {
		if _, ok := cv.env[k]; !ok {
			exports = append(exports, k+"="+shellQuote(cv.args[k]))
		}
	}
	if len(exports) > 0 {
		cmd = "export " + strings.Join(exports, " ") + "\n" + cmd
	}
	cv.step(api.TemplateStep{Run: &api.TemplateCommand{Cmd: cmd}})
	return nil
}

func (cv *converter) envInstruction(in Instruction) error {
	if len(in.Args) == 0 {
		return errorf(in.Line, "ENV takes name=value pairs")
	}
	set := map[string]string{}
	if !strings.Contains(in.Args[0], "=") {
		// The old form: ENV NAME the rest of the line.
		if len(in.Args) < 2 {
			return errorf(in.Line, "ENV %s: want ENV %s=value", in.Args[0], in.Args[0])
		}
		raw := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(in.Raw[len("ENV"):]), in.Args[0]))
		v, err := cv.expand(in, raw)
		if err != nil {
			return err
		}
		set[in.Args[0]] = v
	} else {
		for _, w := range in.Args {
			name, val, ok := strings.Cut(w, "=")
			if !ok {
				return errorf(in.Line, "ENV %s: want name=value", w)
			}
			// Every value of one ENV sees the variables before it.
			v, err := cv.expand(in, val)
			if err != nil {
				return err
			}
			set[name] = v
		}
	}
	for name := range set {
		if !validName(name) {
			return errorf(in.Line, "ENV %s: a name is letters, digits and _", name)
		}
	}
	maps.Copy(cv.env, set)
	cv.step(api.TemplateStep{Env: set})
	return nil
}

// lizardUser maps a USER or --chown to Lizard's users.
func lizardUser(u string) (string, bool) {
	name, group, hasGroup := strings.Cut(u, ":")
	who := map[string]string{"root": "root", "0": "root", "user": "user", "1000": "user"}[name]
	if who == "" {
		return "", false
	}
	if hasGroup && map[string]string{"root": "root", "0": "root", "user": "user", "1000": "user"}[group] != who {
		return "", false
	}
	return who, true
}

var archives = []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst"}

func (cv *converter) copy(in Instruction) error {
	owner := "root" // Docker's: COPY ignores USER
	var mode int64
	for _, f := range in.Flags {
		name, val, _ := strings.Cut(f, "=")
		switch name {
		case "--from":
			return errorf(in.Line, "%s --from: multi-stage builds are not supported (one FROM, files from the build context)", in.Cmd)
		case "--chown":
			v, err := cv.expand(in, val)
			if err != nil {
				return err
			}
			who, ok := lizardUser(v)
			if !ok {
				return errorf(in.Line, "%s --chown=%s: files belong to root or user (uid 1000)", in.Cmd, v)
			}
			owner = who
		case "--chmod":
			m, err := strconv.ParseInt(val, 8, 32)
			if err != nil || m < 0 || m > 0o777 {
				return errorf(in.Line, "%s --chmod=%s: want octal permission bits, such as 0755", in.Cmd, val)
			}
			mode = m
		case "--link":
		default:
			return errorf(in.Line, "%s %s is not supported", in.Cmd, f)
		}
	}
	if len(in.Args) < 2 {
		return errorf(in.Line, "%s takes sources and a destination", in.Cmd)
	}
	words := make([]string, len(in.Args))
	for i, w := range in.Args {
		v := w
		if !in.JSON {
			var err error
			if v, err = cv.expand(in, w); err != nil {
				return err
			}
		}
		words[i] = v
	}
	srcs, dest := words[:len(words)-1], words[len(words)-1]
	toDir := strings.HasSuffix(dest, "/") || len(srcs) > 1
	if !path.IsAbs(dest) {
		dest = path.Join(cv.workdir, dest)
	}
	if cv.opts.Context == nil {
		return errorf(in.Line, "%s: no build context to copy from", in.Cmd)
	}
	var files []api.TemplateFile
	var links []api.TemplateStep
	for _, src := range srcs {
		if in.Cmd == "ADD" {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return errorf(in.Line, "ADD %s: ADD of a URL is not supported (a build has no network): download it beside the Dockerfile and COPY it", src)
			}
			for _, a := range archives {
				if strings.HasSuffix(strings.ToLower(src), a) {
					return errorf(in.Line, "ADD %s: Lizard does not unpack archives: COPY it and unpack it with RUN tar", src)
				}
			}
		}
		entries, isDir, err := cv.opts.Context.Entries(in.Line, src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := path.Join(dest, e.Rel)
			if !isDir && (toDir || e.Rel == "") {
				p = dest
				if toDir {
					p = path.Join(dest, path.Base(src))
				}
			}
			if e.Link != "" {
				links = append(links, api.TemplateStep{Symlink: &api.TemplateSymlink{Target: e.Link, Path: p}})
				continue
			}
			m := mode
			if m == 0 {
				m = int64(e.Mode)
			}
			files = append(files, api.TemplateFile{Path: p, Content: base64.StdEncoding.EncodeToString(e.Data), Mode: m, Owner: owner})
		}
	}
	if len(files) > 0 {
		cv.step(api.TemplateStep{Copy: files})
	}
	for _, l := range links {
		cv.step(l)
	}
	return nil
}

// start is the template's start command from ENTRYPOINT and CMD, as
// Docker combines them.
func (cv *converter) start() string {
	cmdWords := cv.cmd
	if len(cv.cmd) > 0 && !cv.cmdExec {
		cmdWords = []string{"/bin/sh", "-c", cv.cmd[0]}
	}
	switch {
	case cv.hasEntrypoint && cv.epShell:
		return cv.entrypoint[0]
	case cv.hasEntrypoint:
		return "exec " + shellQuote(append(slices.Clone(cv.entrypoint), cmdWords...)...)
	case len(cv.cmd) > 0 && !cv.cmdExec:
		return cv.cmd[0]
	case len(cv.cmd) > 0:
		return "exec " + shellQuote(cv.cmd...)
	}
	return ""
}

// shellQuote quotes words for /bin/sh.
func shellQuote(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func firstLine(s string) string {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
