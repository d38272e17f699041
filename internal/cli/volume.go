package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/lizard-build/lizard/api"
)

func init() {
	register("volume", "create, list and delete persistent volumes (mount them with sandbox create --volume)", runVolume)
}

// volumeCommands are filled by the volume_*.go files.
var volumeCommands = map[string]subcommand{}

var volumeOrder = []string{"create", "list", "delete"}

func volumeUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: lizard volume COMMAND [ARGS]\n\nCommands:")
	for _, n := range volumeOrder {
		fmt.Fprintf(w, "  lizard volume %s\n", volumeCommands[n].usage)
	}
	fmt.Fprintln(w, "\nMount one with `lizard sandbox create --volume NAME:/home/user/data` (docs/volumes.md).")
	fmt.Fprintln(w, "Every command takes --api-url and --api-key (default $LIZARD_API_URL, $LIZARD_API_KEY).")
}

func runVolume(ctx context.Context, e Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		volumeUsage(e.Stdout)
		return nil
	}
	sub, ok := volumeCommands[args[0]]
	if !ok {
		volumeUsage(e.Stderr)
		return Usagef("unknown volume command %q", args[0])
	}
	return sub.run(ctx, e, args[1:])
}

// volumeFlag collects --volume NAME:PATH, repeatable.
type volumeFlag struct{ mounts *[]api.VolumeMount }

func (f volumeFlag) String() string {
	if f.mounts == nil {
		return ""
	}
	var s []string
	for _, m := range *f.mounts {
		s = append(s, m.Name+":"+m.Path)
	}
	return strings.Join(s, ",")
}

func (f volumeFlag) Set(v string) error {
	name, path, ok := strings.Cut(v, ":")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME:PATH, such as data:/home/user/data")
	}
	*f.mounts = append(*f.mounts, api.VolumeMount{Name: name, Path: path})
	return nil
}
