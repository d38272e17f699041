package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/store"
)

// projectIDPattern is what a project ID may be: short, lowercase, safe in
// URLs, logs and file names.
var projectIDPattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

func adminUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  lizard admin create-project --id ID [--data-dir DIR] [--json]   make a project and its first API key
  lizard admin create-key --project ID [--data-dir DIR] [--json]  make another API key for a project
  lizard admin build-template [--cache-dir DIR] [NAME]           build a built-in template's root filesystem
                                                                 here (progress on stderr, its path on stdout)
  lizard admin backup --to DIR [--data-dir DIR] [--secrets-key-to FILE] [--image-store URL]
                                                                 copy a data directory while its server runs
  lizard admin restore --from DIR [--data-dir DIR] [--secrets-key-from FILE]
                                                                 a backup onto a new data directory
  lizard admin check [--data-dir DIR] [--repair] [--json] [--image-store URL]
                                                                 list what nothing accounts for (rows without
                                                                 images, images without rows, leftover network
                                                                 namespaces, veths, nftables tables, cgroups, loop
                                                                 devices, volumes, template builds, kept runsc
                                                                 builds and agent copies); --repair
                                                                 removes them, with the server stopped; with the
                                                                 server's --image-store, images durable there
                                                                 are kept

In a cluster, pass --database-url (or set LIZARD_DATABASE_URL) instead of
--data-dir.

create-project, create-key and backup work whether or not the server is running on DIR
(docs/operations.md). A key is shown once;
only its hash is stored.
`)
}

func runAdmin(ctx context.Context, e cli.Env, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		adminUsage(e.Stdout)
		return nil
	}
	switch args[0] {
	case "create-project":
		return adminCreate(ctx, e, args[1:], true)
	case "create-key":
		return adminCreate(ctx, e, args[1:], false)
	case "build-template":
		return adminBuildTemplate(ctx, e, args[1:])
	case "backup":
		return adminBackup(ctx, e, args[1:])
	case "restore":
		return adminRestore(ctx, e, args[1:])
	case "check":
		return adminCheck(ctx, e, args[1:])
	}
	adminUsage(e.Stderr)
	return cli.Usagef("unknown admin command %q: want create-project, create-key, build-template, backup, restore or check", args[0])
}

// adminKey is what create-project and create-key print with --json.
type adminKey struct {
	ProjectID string `json:"projectId"`
	APIKey    string `json:"apiKey"`
}

// adminCreate makes a project and its first key (newProject), or another
// key for an existing project.
func adminCreate(ctx context.Context, e cli.Env, args []string, newProject bool) error {
	name, idFlag := "admin create-key", "project"
	if newProject {
		name, idFlag = "admin create-project", "id"
	}
	fs := cli.NewFlags(e, name)
	dataDir := fs.String("data-dir", "data", "the server's data directory")
	dbURL := fs.String("database-url", os.Getenv(envDatabaseURL), "a cluster's PostgreSQL URL instead of --data-dir (default: env "+envDatabaseURL+")")
	id := fs.String(idFlag, "", "project ID: 1 to 64 of a-z, 0-9, _ and -")
	asJSON := fs.Bool("json", false, `print {"projectId": ..., "apiKey": ...}`)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("lizard %s takes no arguments, got %q", name, fs.Args())
	}
	if !projectIDPattern.MatchString(*id) {
		return cli.Usagef("--%s %q: want 1 to 64 of a-z, 0-9, _ and -", idFlag, *id)
	}
	if *id == store.InternalProject {
		return cli.Usagef("--%s %q is the server's own project (its template and warm-pool sandboxes); pick another", idFlag, *id)
	}

	var st *store.Store
	var err error
	if *dbURL != "" {
		*dataDir = "the cluster's database"
		st, err = store.OpenURL(ctx, *dbURL)
	} else {
		st, err = store.Open(ctx, *dataDir)
	}
	if err != nil {
		return fmt.Errorf("opening the store in %s: %w", *dataDir, err)
	}
	defer st.Close()
	if newProject {
		err := st.CreateProject(ctx, *id, time.Now())
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("project %s exists; use `lizard admin create-key --project %s` for another key", *id, *id)
		}
		if err != nil {
			return err
		}
	} else if _, err := st.GetProject(ctx, *id); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no project %s in %s; make it with `lizard admin create-project --id %s`", *id, *dataDir, *id)
	} else if err != nil {
		return err
	}
	k, err := auth.Create(ctx, st, *id, "")
	if err != nil {
		return fmt.Errorf("creating a key for project %s: %w", *id, err)
	}

	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		return enc.Encode(adminKey{ProjectID: *id, APIKey: k.String()})
	}
	if newProject {
		fmt.Fprintf(e.Stdout, "Created project %s.\n", *id)
	}
	fmt.Fprintf(e.Stdout, "API key for project %s (shown once; keep it secret):\n\n  %s\n\nUse it with:\n  export LIZARD_API_KEY=%s\n", *id, k, k)
	return nil
}
