package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/lizard-build/lizard/client"
)

// clientFlags are the flags of every subcommand that talks to the API.
// Empty values fall back to LIZARD_API_URL and LIZARD_API_KEY.
type clientFlags struct {
	url, key string
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	f := &clientFlags{}
	fs.StringVar(&f.url, "api-url", "", "Lizard API URL (default $"+client.EnvAPIURL+", then "+client.DefaultBaseURL+")")
	fs.StringVar(&f.key, "api-key", "", "API key (default $"+client.EnvAPIKey+")")
	return f
}

// client builds the API client; explicit flags win over the environment.
// Without a key from either it is a usage error naming both, and where a
// key comes from: the client's own error says "pass an API key", which a
// CLI user cannot map to a flag.
func (f *clientFlags) client() (*client.Client, error) {
	if f.key == "" && os.Getenv(client.EnvAPIKey) == "" {
		return nil, Usagef("no API key: pass --api-key or set %s (`lizard admin create-project` makes a project and its key)", client.EnvAPIKey)
	}
	return client.New(client.Config{BaseURL: f.url, APIKey: f.key})
}

// kvFlag collects repeated K=V flags into a map.
type kvFlag map[string]string

func (kv kvFlag) String() string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k+"="+kv[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (kv kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	kv[k] = v
	return nil
}

// durationFlag is an optional duration sent as milliseconds: unset means
// "the server's default", 0 means "no limit".
type durationFlag struct {
	ms *int64
}

func (d *durationFlag) String() string {
	if d == nil || d.ms == nil {
		return ""
	}
	return (time.Duration(*d.ms) * time.Millisecond).String()
}

func (d *durationFlag) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	ms := v.Milliseconds()
	d.ms = &ms
	return nil
}

// parseDuration accepts Go durations (5m, 90s, 1h30m) and a bare 0.
func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 30s, 5m or 0, got %q", s)
	}
	if v < 0 {
		return 0, errors.New("duration must not be negative")
	}
	if v > 0 && v < time.Millisecond {
		return 0, fmt.Errorf("duration %s is under a millisecond", v)
	}
	return v, nil
}

// parseID parses args for a command that takes exactly one ID, with its
// flags before or after it.
func parseID(fs *flag.FlagSet, args []string, usage string) (string, error) {
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", Usagef("usage: %s", usage)
	}
	return pos[0], nil
}

// ParseInterspersed parses flags that may come before, between or after the
// positional arguments (`lizard sandbox get ID --json`) and returns the
// positional ones.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := Parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			// After "--" nothing is a flag.
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
