// Command cleanup ends every sandbox a test server's gVisor runtime still
// has, as the Go e2e harness does when a test server shuts down: the
// server's own (template snapshot builder, warm pool) and any the test
// could not kill through the API. Without it such a sandbox would outlive
// its deleted data directory. Usage: cleanup RUNSC DATA_DIR
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: cleanup RUNSC DATA_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "cleanup:", err)
		os.Exit(1)
	}
}

func run(runsc, dataDir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// No spare networks: this process only removes. Close waits for the
	// removals' background part.
	rt, err := gvisor.New(gvisor.Config{Runsc: runsc, Dir: filepath.Join(dataDir, "gvisor"), SpareNetworks: -1})
	if err != nil {
		return fmt.Errorf("opening the runtime of %s: %w", dataDir, err)
	}
	defer rt.Close(context.WithoutCancel(ctx))
	ids, err := rt.List(ctx)
	if err != nil {
		return fmt.Errorf("listing sandboxes left behind: %w", err)
	}
	for _, id := range ids {
		fmt.Printf("ending sandbox %s, still running when the test ended\n", id)
		if err := rt.Kill(ctx, id); err != nil {
			return fmt.Errorf("ending sandbox %s: %w", id, err)
		}
	}
	return nil
}
