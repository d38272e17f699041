package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
	"github.com/lizard-build/lizard/internal/dockerfile"
)

func init() {
	register("template", "build, list, inspect and delete custom templates (docs/templates.md)", RunTemplate)
}

var templateCommands = map[string]subcommand{
	"build":  {"build -f RECIPE.yaml|Dockerfile | --from-image REF [--name NAME] [--context DIR] [--build-arg K=V]... [--start CMD] [--ready CMD] [--registry-username U [--registry-password-stdin | --registry-password-secret NAME]] [--skip-cache] [--quiet] [--json]", templateBuild},
	"list":   {"list [--json]", templateList},
	"get":    {"get NAME [--json]", templateGet},
	"delete": {"delete NAME...", templateDelete},
}

var templateOrder = []string{"build", "list", "get", "delete"}

func templateUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: lizard template COMMAND [ARGS]\n\nCommands:")
	for _, n := range templateOrder {
		fmt.Fprintf(w, "  lizard template %s\n", templateCommands[n].usage)
	}
	fmt.Fprintln(w, "\nA recipe is a YAML file, or a Dockerfile (named Dockerfile, Dockerfile.*, *.dockerfile or")
	fmt.Fprintln(w, "Containerfile, or given with --dockerfile; docs/templates.md); create sandboxes from a template with")
	fmt.Fprintln(w, "`lizard sandbox create --template NAME`.")
	fmt.Fprintln(w, "Every command takes --api-url and --api-key (default $LIZARD_API_URL, $LIZARD_API_KEY).")
}

// RunTemplate is `lizard template`, the same on the server's binary and the
// client's; a built-in template is built on the server's machine with
// `lizard admin build-template` instead.
func RunTemplate(ctx context.Context, e Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		templateUsage(e.Stdout)
		return nil
	}
	sub, ok := templateCommands[args[0]]
	if !ok {
		templateUsage(e.Stderr)
		return Usagef("unknown template command %q", args[0])
	}
	return sub.run(ctx, e, args[1:])
}

func templateBuild(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "template build")
	cf := addClientFlags(fs)
	file := fs.String("f", "", "the recipe: a YAML file (its files' src paths are relative to it) or a Dockerfile")
	name := fs.String("name", "", "the template's name (default: the recipe's name:)")
	isDockerfile := fs.Bool("dockerfile", false, "-f is a Dockerfile, whatever its name")
	contextDir := fs.String("context", "", "a Dockerfile's build context, which COPY and ADD read (default: the Dockerfile's directory)")
	buildArgs := kvFlag{}
	fs.Var(buildArgs, "build-arg", "a Dockerfile's ARG value, NAME=VALUE (repeatable)")
	start := fs.String("start", "", "the start command, run at boot (instead of the recipe's, or a Dockerfile's CMD/ENTRYPOINT)")
	ready := fs.String("ready", "", "the ready check: a command that exits 0 once the start command is ready")
	quiet := fs.Bool("quiet", false, "show the steps only, not their output")
	asJSON := fs.Bool("json", false, "print the template as JSON when done")
	skipCache := fs.Bool("skip-cache", false, "run every step again, even when the project has a build of the recipe or of a prefix of its steps")
	image := fs.String("from-image", "", "build on this OCI/Docker image (tag or digest) instead of a built-in template; with -f, the recipe's from")
	regUser := fs.String("registry-username", "", "username for the image's registry (with $"+EnvRegistryPassword+" or --registry-password-stdin)")
	regStdin := fs.Bool("registry-password-stdin", false, "read the registry password from stdin")
	regSecret := fs.String("registry-password-secret", "", "the project's secret holding the registry password (lizard secret set NAME --host REGISTRY); the server opens it for this pull")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	const usage = "usage: lizard template build -f RECIPE.yaml|Dockerfile | --from-image REF [--name NAME] [--context DIR] [--build-arg K=V]... [--start CMD] [--ready CMD] [--registry-username U] [--skip-cache] [--quiet] [--json]"
	if (*file == "" && *image == "") || len(pos) != 0 {
		if *file == "" && len(pos) == 1 {
			return Usagef("%s (a built-in template such as %q is built on the server's machine: lizard admin build-template %s)", usage, pos[0], pos[0])
		}
		return Usagef("%s", usage)
	}
	var fileName string
	var recipe api.TemplateRecipe
	switch {
	case *file == "":
		// --from-image alone: the image as it is.
	case *isDockerfile || dockerfileName(*file):
		if recipe, err = loadDockerfile(e, *file, *contextDir, buildArgs); err != nil {
			return err
		}
	default:
		if *contextDir != "" || len(buildArgs) > 0 {
			return Usagef("--context and --build-arg are a Dockerfile's; %s is read as a YAML recipe (--dockerfile if it is a Dockerfile)", *file)
		}
		if fileName, recipe, err = client.LoadRecipe(*file); err != nil {
			return err
		}
	}
	if *start != "" {
		recipe.Start = *start
	}
	if *ready != "" {
		recipe.Ready = *ready
	}
	if *name == "" {
		*name = fileName
	}
	if *image != "" {
		recipe.From = *image
	}
	auth, err := registryAuth(e, *regUser, *regStdin, *regSecret)
	if err != nil {
		return err
	}
	if *name == "" {
		return Usagef("the template needs a name: --name NAME, or name: in the recipe")
	}
	return buildTemplate(ctx, e, cf, api.BuildTemplateRequest{Name: *name, Recipe: recipe, Registry: auth, SkipCache: *skipCache}, *quiet, *asJSON)
}

// EnvRegistryPassword is the registry password of `template build
// --registry-username` (a flag would show it in ps and the shell's history).
const EnvRegistryPassword = "LIZARD_REGISTRY_PASSWORD"

// registryAuth is the credentials the flags give, nil for none.
func registryAuth(_ Env, user string, stdin bool, secret string) (*api.RegistryAuth, error) {
	if secret != "" {
		if user == "" || stdin {
			return nil, Usagef("--registry-password-secret needs --registry-username, and no --registry-password-stdin")
		}
		return &api.RegistryAuth{Username: user, PasswordSecret: secret}, nil
	}
	pass := os.Getenv(EnvRegistryPassword)
	if stdin {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
		if err != nil {
			return nil, fmt.Errorf("reading the registry password from stdin: %w", err)
		}
		pass = strings.TrimRight(string(b), "\r\n")
	}
	if user == "" {
		if stdin {
			return nil, Usagef("--registry-password-stdin needs --registry-username")
		}
		return nil, nil
	}
	return &api.RegistryAuth{Username: user, Password: pass}, nil
}

// buildTemplate sends req and prints its progress and outcome.
func buildTemplate(ctx context.Context, e Env, cf *clientFlags, req api.BuildTemplateRequest, quiet, asJSON bool) error {
	c, err := cf.client()
	if err != nil {
		return err
	}
	begin := time.Now()
	t, cached, err := c.Templates().Build(ctx, req, func(ev api.TemplateBuildEvent) {
		switch ev.Type {
		case api.BuildEventStep:
			fmt.Fprintf(e.Stderr, "[%d/%d] %s (%.0fs elapsed)\n", ev.Step, ev.Total, ev.Name, time.Since(begin).Seconds())
		case api.BuildEventLog:
			if !quiet {
				fmt.Fprintln(e.Stderr, ev.Text)
			}
		}
	})
	var be *client.BuildError
	if errors.As(err, &be) {
		fmt.Fprintf(e.Stderr, "build failed: %s\n", be.Message)
		if be.Log != "" {
			fmt.Fprintf(e.Stderr, "--- last output of %q ---\n%s\n", be.Step, strings.TrimRight(be.Log, "\n"))
		}
		return exitError{1}
	}
	if err != nil {
		return fmt.Errorf("building template %s: %w", req.Name, err)
	}
	if asJSON {
		return printJSON(e.Stdout, t)
	}
	how := fmt.Sprintf("built in %.1fs", time.Since(begin).Seconds())
	if cached {
		how = "cached: the same recipe was built before"
	}
	if t.Digest != "" {
		how = "image " + t.Digest + ", " + how
	}
	fmt.Fprintf(e.Stdout, "template %s ready (key %s, %s, %.0f MiB)\n", t.Name, t.Key, how, float64(t.SizeBytes)/(1<<20))
	return nil
}

// builtinTemplate is the built-in template a Dockerfile's FROM may name
// (the recipe's base; TemplateRecipe.base's one value in the API).
const builtinTemplate = "interpreter"

// dockerfileName reports whether file is named as Dockerfiles are.
func dockerfileName(file string) bool {
	base := filepath.Base(file)
	return base == "Dockerfile" || base == "Containerfile" || strings.HasPrefix(base, "Dockerfile.") ||
		strings.HasSuffix(strings.ToLower(base), ".dockerfile")
}

// loadDockerfile converts Dockerfile file, reading its build context
// (default: its directory), into a recipe.
func loadDockerfile(e Env, file, contextDir string, buildArgs map[string]string) (api.TemplateRecipe, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return api.TemplateRecipe{}, fmt.Errorf("reading the Dockerfile: %w", err)
	}
	if contextDir == "" {
		contextDir = filepath.Dir(file)
	}
	bctx, err := dockerfile.OpenContext(contextDir)
	if err != nil {
		return api.TemplateRecipe{}, err
	}
	res, err := dockerfile.Convert(data, dockerfile.Options{BuildArgs: buildArgs, Context: bctx, Templates: []string{builtinTemplate}})
	if err != nil {
		return api.TemplateRecipe{}, fmt.Errorf("%s: %w", file, err)
	}
	for _, l := range res.Ignored {
		fmt.Fprintf(e.Stderr, "%s: ignored: %s\n", file, l)
	}
	res.Recipe.From = res.Image // FROM an image: the recipe's from
	return res.Recipe, nil
}

// templateList is `lizard template list [--json]`.
var templateList = listCommand("template", func(ctx context.Context, c *client.Client) (table, error) {
	ts, err := c.Templates().List(ctx)
	t := table{json: api.TemplateList{Templates: ts}, header: "NAME\tBASE\tKEY\tCREATED\tSIZE"}
	for _, tp := range ts {
		t.rows = append(t.rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%.0f MiB\n", tp.Name, tp.Base, tp.Key, formatTime(&tp.CreatedAt), float64(tp.SizeBytes)/(1<<20)))
	}
	return t, err
})

func templateGet(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "template get")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	name, err := parseID(fs, args, "lizard template get NAME [--json]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	t, err := c.Templates().Get(ctx, name)
	if err != nil {
		return fmt.Errorf("getting template %s: %w", name, err)
	}
	if *asJSON {
		return printJSON(e.Stdout, t)
	}
	r := t.Recipe
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\t%s\n", t.Name)
	fmt.Fprintf(tw, "PROJECT\t%s\n", t.ProjectID)
	fmt.Fprintf(tw, "BASE\t%s\n", t.Base)
	fmt.Fprintf(tw, "KEY\t%s\n", t.Key)
	fmt.Fprintf(tw, "CREATED\t%s\n", formatTime(&t.CreatedAt))
	fmt.Fprintf(tw, "BUILD\t%.1fs\n", float64(t.BuildMs)/1000)
	fmt.Fprintf(tw, "SIZE\t%.0f MiB\n", float64(t.SizeBytes)/(1<<20))
	fmt.Fprintf(tw, "APT\t%s\n", strings.Join(r.Apt, " "))
	fmt.Fprintf(tw, "PIP\t%s\n", strings.Join(r.Pip, " "))
	for _, f := range r.Files {
		fmt.Fprintf(tw, "FILE\t%s (%d bytes, %o, %s)\n", f.Path, f.Size, f.Mode, f.Owner)
	}
	for k, v := range r.Env {
		fmt.Fprintf(tw, "ENV\t%s=%s\n", k, v)
	}
	if r.Workdir != "" {
		fmt.Fprintf(tw, "WORKDIR\t%s\n", r.Workdir)
	}
	for _, c := range r.Run {
		fmt.Fprintf(tw, "RUN\t(%s) %s\n", c.User, firstLine(c.Cmd))
	}
	if r.Start != "" {
		fmt.Fprintf(tw, "START\t%s\n", r.Start)
	}
	return tw.Flush()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func templateDelete(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "template delete")
	cf := addClientFlags(fs)
	names, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return Usagef("usage: lizard template delete NAME...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if err := c.Templates().Delete(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("deleting template %s: %w", n, err))
			continue
		}
		fmt.Fprintln(e.Stdout, n)
	}
	return errors.Join(errs...)
}
