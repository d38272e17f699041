package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lizard-build/lizard/api"
)

func init() {
	register("run", "run code in a sandbox (Python keeps its variables)", runRun)
}

// stdin is what `lizard run SANDBOX -` and `lizard exec --stdin` read; tests
// replace it.
var stdin io.Reader = os.Stdin

var languages = []string{"python", "javascript", "bash"}

type runArgs struct {
	sandbox string
	req     api.ExecuteRequest
	clientF *clientFlags
}

// parseRun parses `lizard run [flags] SANDBOX CODE|-`. Flags stop at
// SANDBOX so that code starting with "-" is not taken for a flag.
func parseRun(e Env, args []string) (*runArgs, error) {
	fs := NewFlags(e, "run")
	a := &runArgs{clientF: addClientFlags(fs)}
	envs := kvFlag{}
	var timeout durationFlag
	fs.StringVar(&a.req.Language, "language", "python", "language: "+strings.Join(languages, ", "))
	fs.StringVar(&a.req.ContextID, "context", "", "context id (default: the language's default context)")
	fs.Var(envs, "env", "environment variable K=V for this run (repeatable)")
	fs.Var(&timeout, "timeout", "interrupt the code after this long, such as 30s; 0 = no limit (default 60s)")
	fs.Usage = func() {
		fmt.Fprintln(e.Stderr, "Usage: lizard run [flags] SANDBOX CODE|-   (- reads the code from stdin)")
		fs.PrintDefaults()
	}
	if err := Parse(fs, args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 3 && rest[1] == "--" {
		rest = []string{rest[0], rest[2]} // lizard run SANDBOX -- -1
	}
	if len(rest) != 2 {
		return nil, Usagef("usage: lizard run [flags] SANDBOX CODE|-")
	}
	if !contains(languages, a.req.Language) {
		return nil, Usagef("unknown language %q: want one of %s", a.req.Language, strings.Join(languages, ", "))
	}
	a.sandbox, a.req.Code = rest[0], rest[1]
	a.req.TimeoutMs = timeout.ms
	if len(envs) > 0 {
		a.req.Envs = envs
	}
	if a.req.Language == "python" && a.req.ContextID != "" {
		// The context's language decides; sending the default too would
		// contradict a JavaScript or bash context.
		a.req.Language = ""
	}
	return a, nil
}

func runRun(ctx context.Context, e Env, args []string) error {
	a, err := parseRun(e, args)
	if err != nil {
		return err
	}
	if a.req.Code == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading code from stdin: %w", err)
		}
		a.req.Code = string(b)
	}
	c, err := a.clientF.client()
	if err != nil {
		return err
	}
	x, err := c.Execute(ctx, a.sandbox, a.req, func(ev api.ExecuteEvent) {
		switch ev.Type {
		case api.EventStdout:
			io.WriteString(e.Stdout, ev.Text)
		case api.EventStderr:
			io.WriteString(e.Stderr, ev.Text)
		case api.EventResult:
			printResult(e, ev.Result)
		}
	})
	if err != nil {
		return fmt.Errorf("running code in sandbox %s: %w", a.sandbox, err)
	}
	if x.Error != nil {
		if tb := strings.TrimRight(x.Error.Traceback, "\n"); tb != "" {
			fmt.Fprintln(e.Stderr, tb)
		}
		return fmt.Errorf("the code raised %s: %s", x.Error.Name, x.Error.Message)
	}
	return nil
}

// printResult prints a text result as is; other results (images) would only
// flood the terminal with base64, so it says what they are instead.
func printResult(e Env, r *api.Result) {
	if r == nil {
		return
	}
	if strings.HasPrefix(r.Mime, "text/") || r.Mime == "application/json" {
		io.WriteString(e.Stdout, r.Data)
		if !strings.HasSuffix(r.Data, "\n") {
			io.WriteString(e.Stdout, "\n")
		}
		return
	}
	fmt.Fprintf(e.Stderr, "[%s %s, %d bytes of base64]\n", r.Type, r.Mime, len(r.Data))
}
