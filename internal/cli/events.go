package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	register("events", "list or follow the project's sandbox lifecycle events (docs/events.md)", runEvents)
}

// typesFlag is a repeatable --type, each value one type or several
// separated by commas.
type typesFlag []string

func (t *typesFlag) String() string { return strings.Join(*t, ",") }

func (t *typesFlag) Set(v string) error {
	*t = append(*t, strings.Split(v, ",")...)
	return nil
}

// runEvents is `lizard events [--follow] [--sandbox ID] [--type T]...
// [--metadata K=V]... [--after ID] [--limit N] [--json]`.
func runEvents(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "events")
	cf := addClientFlags(fs)
	follow := fs.Bool("follow", false, "print events as they happen, until interrupted")
	sandbox := fs.String("sandbox", "", "only this sandbox's events")
	var types typesFlag
	fs.Var(&types, "type", "only events of this type, such as sandbox.paused (repeatable, or comma-separated)")
	metadata := kvFlag{}
	fs.Var(metadata, "metadata", "only events of sandboxes with label K=V (repeatable)")
	after := fs.Int64("after", 0, "only events after this ID (with --follow: replay from it)")
	limit := fs.Int("limit", 0, "most events listed (1 to 1000; default 100)")
	asJSON := fs.Bool("json", false, "print each event as a JSON line")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return Usagef("usage: lizard events [--follow] [--sandbox ID] [--type T]... [--metadata K=V]... [--after ID] [--limit N] [--json]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	opts := client.EventOptions{SandboxID: *sandbox, Types: types, Metadata: metadata, After: *after, FromStart: *after > 0, Limit: *limit}
	print := func(ev api.Event) error { return printEvent(e.Stdout, ev, *asJSON) }
	if !*follow {
		list, err := c.Events().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing events: %w", err)
		}
		for _, ev := range list.Events {
			if err := print(ev); err != nil {
				return err
			}
		}
		if list.HasMore && !*asJSON {
			fmt.Fprintf(e.Stderr, "more events: lizard events --after %d\n", list.Next)
		}
		return nil
	}
	s, err := c.Events().Follow(ctx, opts)
	if err != nil {
		return fmt.Errorf("following events: %w", err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of a follow
			}
			return fmt.Errorf("following events (resume with --after %d): %w", s.Last, err)
		}
		if err := print(ev); err != nil {
			return err
		}
	}
}

// printEvent writes one event as a line: JSON, or ID, time, type, sandbox
// and what the event says.
func printEvent(w io.Writer, ev api.Event, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var detail []string
	d := ev.Data
	for _, kv := range [][2]string{{"state", d.State}, {"template", d.Template}, {"snapshot", d.SnapshotID},
		{"forkedFrom", d.ForkedFrom}, {"copies", strings.Join(d.SandboxIDs, ",")}, {"node", d.Node}, {"reason", d.Reason}} {
		if kv[1] != "" {
			detail = append(detail, kv[0]+"="+kv[1])
		}
	}
	_, err := fmt.Fprintf(w, "%d  %s  %-18s %s  %s\n", ev.ID, ev.Time.Local().Format(time.DateTime), ev.Type, ev.SandboxID, strings.Join(detail, " "))
	return err
}
