package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/pykernel"
)

// Defaults for Config fields left zero.
const (
	DefaultPython          = "/opt/lizard/venv/bin/python"
	DefaultUser            = "user"
	DefaultMaxOutputBytes  = 8 << 20
	DefaultMaxRequestBytes = 32 << 20
	// DefaultMaxFileBytes is far past any sandbox's disk: the server's
	// --max-file-mb and the sandbox's disk limit are the bounds that
	// count, and an agent inside a template snapshot keeps the value it
	// started with whatever the server is told later.
	DefaultMaxFileBytes = 1 << 40
)

// Config is everything the agent is told at start, from flags and the
// environment (LoadConfig) or built directly by tests.
type Config struct {
	// Listen is the TCP address of the HTTP API.
	Listen string
	// HealthListen is where the code interpreter's GET /health is answered
	// for code inside the sandbox, as E2B's on port 49999
	// (interphealth.go); empty serves none.
	HealthListen string
	// Python is the interpreter with IPython; its directory goes first on
	// the PATH of everything the agent runs.
	Python string
	// Node and Bash are looked up on the PATH given to code when they hold
	// no slash.
	Node string
	Bash string
	// User runs kernels and processes (uid, gid, home from /etc/passwd).
	// Empty, or a user that does not exist, means the agent's own user.
	User string
	// Home is the default working directory and the base of relative file
	// paths; empty means the user's home.
	Home string
	// RuntimeDir holds per-call scratch files and the node hook.
	RuntimeDir string
	// MaxOutputBytes bounds the stdout+stderr text forwarded per call.
	MaxOutputBytes int64
	// MaxRequestBytes bounds JSON request bodies; MaxFileBytes bounds uploads.
	MaxRequestBytes int64
	MaxFileBytes    int64
	// Version is reported by GET /health.
	Version string
	// Env is the sandbox's environment, given to every kernel and process;
	// nil means the agent's own environment (the runtime sets the sandbox's
	// envs there).
	Env []string
	// Preload names modules the default Python kernel imports at start,
	// binding no names (LIZARD_AGENT_PRELOAD=numpy,pandas): the server
	// sets it in the sandbox it checkpoints as a template snapshot.
	Preload []string
	// ShareHeap serves POST /heap/dump and /heap/wait once (heap.go):
	// the template builder sets it (LIZARD_AGENT_SHARE_HEAP=1) in the
	// sandbox it checkpoints when the server runs with --share-heap.
	ShareHeap bool
	// HeapDir is where the kernel finds the shared heap's file (HeapFile);
	// "" is api.HeapMount. Tests set their own.
	HeapDir string
	// TemplateConfig is the custom template's settings file
	// (TemplateSettings, written by its build); "" or a missing file:
	// none. LoadConfig sets DefaultTemplateConfig.
	TemplateConfig string
	// Secret, when set, must come with every request but /health as a
	// Bearer token (guard.go); read from LIZARD_AGENT_SECRET, never a flag,
	// since every process may read the command line.
	Secret string
	// Sudo is where the sandbox's sudo is installed (a link to the agent,
	// internal/agent/sudo) and served on sudo.SocketPath; "" gives none.
	// The node sets it for every sandbox (LIZARD_AGENT_SUDO): never a
	// default, since an agent run on a host must not replace its sudo.
	Sudo string
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// StartKernel starts Python kernels; nil means the pykernel package.
	// Tests replace it with a fake.
	StartKernel func(ctx context.Context, cfg pykernel.Config) (Kernel, error)
}

// LoadConfig reads the agent's flags; every flag also has an environment
// variable LIZARD_AGENT_<NAME> (for --max-output: LIZARD_AGENT_MAX_OUTPUT)
// that sets its default.
func LoadConfig(args []string, getenv func(string) string) (Config, error) {
	envOr := func(name, def string) string {
		if v := getenv("LIZARD_AGENT_" + name); v != "" {
			return v
		}
		return def
	}
	var cfg Config
	fs := flag.NewFlagSet("lizard-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Listen, "listen", envOr("LISTEN", net.JoinHostPort("0.0.0.0", strconv.Itoa(api.AgentPort))), "TCP address to serve the agent API on")
	fs.StringVar(&cfg.HealthListen, "health-listen", envOr("HEALTH_LISTEN", DefaultHealthListen), "TCP address of the code interpreter's GET /health for code inside the sandbox, as E2B's (\"none\": not served)")
	fs.StringVar(&cfg.Python, "python", envOr("PYTHON", DefaultPython), "Python interpreter with IPython")
	fs.StringVar(&cfg.Node, "node", envOr("NODE", "node"), "Node.js binary (looked up on PATH)")
	fs.StringVar(&cfg.Bash, "bash", envOr("BASH", "bash"), "bash binary (looked up on PATH)")
	fs.StringVar(&cfg.User, "user", envOr("USER_NAME", DefaultUser), "user that runs code (empty: the agent's own user)")
	fs.StringVar(&cfg.Home, "home", envOr("HOME", ""), "home directory of the code's user (default from /etc/passwd)")
	fs.StringVar(&cfg.RuntimeDir, "runtime-dir", envOr("RUNTIME_DIR", ""), "directory for per-call scratch files (default $TMPDIR/lizard-agent)")
	maxOut := fs.Int64("max-output", envInt(envOr("MAX_OUTPUT", ""), DefaultMaxOutputBytes), "bytes of stdout+stderr forwarded per call")
	maxFile := fs.Int64("max-file", envInt(envOr("MAX_FILE", ""), DefaultMaxFileBytes), "largest file upload in bytes")
	fs.StringVar(&cfg.Sudo, "sudo", envOr("SUDO", ""), "install sudo at this path and serve it (empty: no sudo)")
	preload := fs.String("preload", envOr("PRELOAD", ""), "comma-separated modules the default Python kernel imports at start")
	fs.BoolVar(&cfg.ShareHeap, "share-heap", envOr("SHARE_HEAP", "") == "1", "serve POST /heap/dump and /heap/wait once: share the default kernel's heap from a file")
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("parsing flags: %w", err)
	}
	for _, m := range strings.Split(*preload, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Preload = append(cfg.Preload, m)
		}
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.MaxOutputBytes, cfg.MaxFileBytes = *maxOut, *maxFile
	if cfg.HealthListen == "none" {
		cfg.HealthListen = ""
	}
	cfg.Secret = getenv("LIZARD_AGENT_SECRET")
	cfg.TemplateConfig = envOr("TEMPLATE_CONFIG", DefaultTemplateConfig)
	return cfg, cfg.validate()
}

func envInt(s string, def int64) int64 {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return def
}

func (c *Config) validate() error {
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("--listen %q: %w", c.Listen, err)
		}
	}
	if c.HealthListen != "" {
		if _, _, err := net.SplitHostPort(c.HealthListen); err != nil {
			return fmt.Errorf("--health-listen %q: %w", c.HealthListen, err)
		}
	}
	if c.MaxOutputBytes < 0 || c.MaxRequestBytes < 0 || c.MaxFileBytes < 0 {
		return errors.New("size limits must not be negative")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = net.JoinHostPort("0.0.0.0", strconv.Itoa(api.AgentPort))
	}
	if c.Python == "" {
		c.Python = DefaultPython
	}
	if c.Node == "" {
		c.Node = "node"
	}
	if c.Bash == "" {
		c.Bash = "bash"
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.HeapDir == "" {
		c.HeapDir = api.HeapMount
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.StartKernel == nil {
		c.StartKernel = func(ctx context.Context, cfg pykernel.Config) (Kernel, error) {
			k, err := pykernel.Start(ctx, cfg)
			if err != nil {
				return nil, err
			}
			return k, nil
		}
	}
}
