package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	register("sandbox", "create, list, inspect and kill sandboxes", runSandbox)
}

type subcommand struct {
	usage string
	run   func(ctx context.Context, e Env, args []string) error
}

var sandboxCommands = map[string]subcommand{
	"create":  {"create [--template T] [--timeout 5m|0] [--env K=V]... [--metadata K=V]... [--lizard-token] [--volume NAME:PATH]... [--public-ports] [--allow-domain D]... [--deny-domain D]... [--network-default allow|deny] [--json]", sandboxCreate},
	"list":    {"list [--metadata K=V]... [--state S] [--json]", sandboxList},
	"get":     {"get ID [--json]", sandboxGet},
	"kill":    {"kill ID...", sandboxKill},
	"timeout": {"timeout ID DURATION   (0 = never expires)", sandboxTimeout},
}

var sandboxOrder = []string{"create", "list", "get", "kill", "timeout"}

func sandboxUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: lizard sandbox COMMAND [ARGS]\n\nCommands:")
	for _, n := range sandboxOrder {
		fmt.Fprintf(w, "  lizard sandbox %s\n", sandboxCommands[n].usage)
	}
	fmt.Fprintln(w, "\nEvery command takes --api-url and --api-key (default $LIZARD_API_URL, $LIZARD_API_KEY).")
}

func runSandbox(ctx context.Context, e Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		sandboxUsage(e.Stdout)
		return nil
	}
	sub, ok := sandboxCommands[args[0]]
	if !ok {
		sandboxUsage(e.Stderr)
		return Usagef("unknown sandbox command %q", args[0])
	}
	return sub.run(ctx, e, args[1:])
}

// sandboxCreateArgs is what `lizard sandbox create` was asked for.
type sandboxCreateArgs struct {
	req     api.CreateSandboxRequest
	json    bool
	clientF *clientFlags
}

func parseSandboxCreate(e Env, args []string) (*sandboxCreateArgs, error) {
	fs := NewFlags(e, "sandbox create")
	a := &sandboxCreateArgs{clientF: addClientFlags(fs)}
	envs, metadata := kvFlag{}, kvFlag{}
	var timeout durationFlag
	fs.StringVar(&a.req.Template, "template", "", "template to boot (default: the server's, interpreter)")
	fs.Var(&timeout, "timeout", "life of the sandbox, such as 5m; 0 = never expires (default: the server's, 5m)")
	fs.Var(envs, "env", "environment variable K=V for code in the sandbox (repeatable)")
	fs.Var(metadata, "metadata", "label K=V (repeatable)")
	fs.BoolVar(&a.req.LizardToken, "lizard-token", false, "give the sandbox an API key scoped to its project")
	fs.Var(volumeFlag{&a.req.Volumes}, "volume", "mount the project's volume NAME at PATH, as NAME:PATH (repeatable; docs/volumes.md)")
	fs.BoolVar(&a.req.PublicPorts, "public-ports", false, "let anyone with a port's URL reach the sandbox's ports, without a key or its access token (docs/ports.md)")
	var nf networkFlags
	fs.Var(&nf.allow, "allow-domain", "give the sandbox a network policy allowing this name, *.wildcard or IPv4 prefix (repeatable; docs/network.md)")
	fs.Var(&nf.deny, "deny-domain", "give the sandbox a network policy denying this name, *.wildcard or IPv4 prefix (repeatable)")
	fs.StringVar(&nf.def, "network-default", "", "allow or deny: what the network policy does with names no rule names (default allow)")
	fs.BoolVar(&a.json, "json", false, "print the sandbox as JSON instead of its id")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, Usagef("sandbox create takes no arguments, got %q", pos)
	}
	a.req.Network = nf.policy()
	a.req.TimeoutMs = timeout.ms
	if len(envs) > 0 {
		a.req.Envs = envs
	}
	if len(metadata) > 0 {
		a.req.Metadata = metadata
	}
	return a, nil
}

func sandboxCreate(ctx context.Context, e Env, args []string) error {
	a, err := parseSandboxCreate(e, args)
	if err != nil {
		return err
	}
	c, err := a.clientF.client()
	if err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, a.req)
	if err != nil {
		return fmt.Errorf("creating sandbox: %w", err)
	}
	if a.json {
		return printJSON(e.Stdout, sb)
	}
	fmt.Fprintln(e.Stdout, sb.SandboxID)
	return nil
}

type sandboxListArgs struct {
	opts    client.ListOptions
	json    bool
	clientF *clientFlags
}

func parseSandboxList(e Env, args []string) (*sandboxListArgs, error) {
	fs := NewFlags(e, "sandbox list")
	a := &sandboxListArgs{clientF: addClientFlags(fs)}
	metadata := kvFlag{}
	fs.Var(metadata, "metadata", "only sandboxes with label K=V (repeatable)")
	fs.StringVar(&a.opts.State, "state", "", "only sandboxes in this state: "+strings.Join(states, ", "))
	fs.BoolVar(&a.json, "json", false, "print JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, Usagef("sandbox list takes no arguments, got %q", pos)
	}
	if a.opts.State != "" && !contains(states, a.opts.State) {
		return nil, Usagef("unknown state %q: want one of %s", a.opts.State, strings.Join(states, ", "))
	}
	if len(metadata) > 0 {
		a.opts.Metadata = metadata
	}
	return a, nil
}

var states = []string{api.StateStarting, api.StateRunning, api.StatePaused, api.StateKilled, api.StateExpired, api.StateFailed}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sandboxList(ctx context.Context, e Env, args []string) error {
	a, err := parseSandboxList(e, args)
	if err != nil {
		return err
	}
	c, err := a.clientF.client()
	if err != nil {
		return err
	}
	list, err := c.ListSandboxes(ctx, a.opts)
	if err != nil {
		return fmt.Errorf("listing sandboxes: %w", err)
	}
	if a.json {
		return printJSON(e.Stdout, api.SandboxList{Sandboxes: list})
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTEMPLATE\tCREATED\tEXPIRES")
	for _, sb := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.SandboxID, sb.State, sb.Template, formatTime(&sb.CreatedAt), expires(sb))
	}
	return tw.Flush()
}

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// expires says when a sandbox ends: never, its deadline, or "-" once over.
func expires(sb api.Sandbox) string {
	if sb.EndedAt != nil {
		return "-"
	}
	if sb.ExpiresAt == nil {
		return "never"
	}
	return formatTime(sb.ExpiresAt)
}

func sandboxGet(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox get")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	id, err := parseID(fs, args, "lizard sandbox get ID [--json]")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return fmt.Errorf("getting sandbox %s: %w", id, err)
	}
	if *asJSON {
		return printJSON(e.Stdout, sb)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t%s\n", sb.SandboxID)
	fmt.Fprintf(tw, "PROJECT\t%s\n", sb.ProjectID)
	fmt.Fprintf(tw, "STATE\t%s\n", sb.State)
	fmt.Fprintf(tw, "TEMPLATE\t%s\n", sb.Template)
	fmt.Fprintf(tw, "CREATED\t%s\n", formatTime(&sb.CreatedAt))
	fmt.Fprintf(tw, "EXPIRES\t%s\n", expires(*sb))
	if sb.EndedAt != nil {
		fmt.Fprintf(tw, "ENDED\t%s\n", formatTime(sb.EndedAt))
	}
	if len(sb.Metadata) > 0 {
		fmt.Fprintf(tw, "METADATA\t%s\n", kvFlag(sb.Metadata).String())
	}
	return tw.Flush()
}

func sandboxKill(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox kill")
	cf := addClientFlags(fs)
	ids, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return Usagef("usage: lizard sandbox kill ID...")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	// Kill every sandbox asked for even when one fails, then report all
	// failures: a half-done cleanup is worse than a noisy one.
	var errs []error
	for _, id := range ids {
		err := c.KillSandbox(ctx, id)
		if errors.Is(err, client.ErrGone) {
			err = nil // already ended: what was asked for is true
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("killing sandbox %s: %w", id, err))
			continue
		}
		fmt.Fprintln(e.Stdout, id)
	}
	return errors.Join(errs...)
}

func sandboxTimeout(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox timeout")
	cf := addClientFlags(fs)
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return Usagef("usage: lizard sandbox timeout ID DURATION")
	}
	d, err := parseDuration(pos[1])
	if err != nil {
		return Usagef("%v", err)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.SetTimeout(ctx, pos[0], d.Milliseconds())
	if err != nil {
		return fmt.Errorf("setting the timeout of sandbox %s: %w", pos[0], err)
	}
	fmt.Fprintf(e.Stdout, "%s expires %s\n", sb.SandboxID, expires(*sb))
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
