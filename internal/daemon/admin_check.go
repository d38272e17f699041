package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/lizard-build/lizard/internal/check"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// adminCheck is `lizard admin check [--repair]`: what a data directory and
// this host hold that nothing accounts for (internal/check).
func adminCheck(ctx context.Context, e cli.Env, args []string) error {
	fs := cli.NewFlags(e, "admin check")
	dataDir := fs.String("data-dir", "data", "the server's data directory")
	cacheDefault := template.DefaultCacheDir
	if d := os.Getenv("LIZARD_CACHE_DIR"); d != "" {
		cacheDefault = d
	}
	cacheDir := fs.String("cache-dir", cacheDefault, "the template cache the server uses (env LIZARD_CACHE_DIR)")
	repair := fs.Bool("repair", false, "remove what it lists; refused while lizard serve runs on the data directory")
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	imageStore := fs.String("image-store", "", "the server's --image-store: a paused sandbox or snapshot whose image is gone from this disk but durable there is kept (its row pointed at the store's copy), not ended; it opens images with the secrets key")
	keyFile := fs.String("secrets-key-file", "", "the server's --secrets-key-file, for --image-store (default: env "+secrets.KeyEnv+", else DATA/"+secrets.KeyFile+")")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("lizard admin check takes no arguments, got %q", fs.Args())
	}
	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		return err
	}
	cache, err := filepath.Abs(*cacheDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, store.FileName)); err != nil {
		return fmt.Errorf("no store in %s: give --data-dir the server's data directory", dir)
	}
	if *repair {
		// A running server makes and removes what a check lists (a pause
		// under way has its image before its row): repair only what
		// stands still.
		release, err := lockDataDir(dir)
		if err != nil {
			return fmt.Errorf("%w (lizard admin check --repair runs with the server stopped; without --repair it only lists)", err)
		}
		defer release()
	}
	images, err := serverImageStore(ctx, *imageStore, dir, *keyFile)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, dir)
	if err != nil {
		return fmt.Errorf("opening the store in %s: %w", dir, err)
	}
	defer st.Close()
	// The server's agent and CLI are, by default, beside this binary:
	// their kept copies are the ones its next boot would use.
	var files []string
	if self, err := os.Executable(); err == nil {
		files = []string{filepath.Join(filepath.Dir(self), "lizard-agent"), filepath.Join(filepath.Dir(self), "lizard-client")}
	}
	found, err := check.Check(ctx, check.Config{DataDir: dir, CacheDir: cache, Store: st, Files: files, Images: images})
	if err != nil {
		return fmt.Errorf("checking %s: %w", dir, err)
	}
	if *asJSON {
		if err := json.NewEncoder(e.Stdout).Encode(struct {
			Findings []check.Finding `json:"findings"`
		}{append([]check.Finding{}, found...)}); err != nil {
			return err
		}
	} else if len(found) == 0 {
		fmt.Fprintf(e.Stdout, "%s: nothing left over.\n", dir)
	} else {
		w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KIND\tWHAT\tWHY")
		for _, f := range found {
			fmt.Fprintf(w, "%s\t%s\t%s\n", f.Kind, f.What, f.Why)
		}
		w.Flush()
	}
	if len(found) == 0 {
		return nil
	}
	if !*repair {
		return fmt.Errorf("%d left over in %s and on this host; lizard admin check --repair removes them (with the server stopped)", len(found), dir)
	}
	var failed int
	for _, f := range found {
		if err := f.Repair(ctx); err != nil {
			failed++
			fmt.Fprintln(e.Stderr, "lizard:", err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("repaired %d of %d; see above", len(found)-failed, len(found))
	}
	if !*asJSON {
		fmt.Fprintf(e.Stdout, "Repaired the %d above.\n", len(found))
	}
	return nil
}
