package daemon

import (
	"flag"
	"time"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/events"
)

// eventFlags are the lifecycle events' flags (docs/events.md), taken by
// the processes that serve and prune them: `lizard serve` and `lizard api`.
type eventFlags struct {
	Retention time.Duration
}

func (f *eventFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.Retention, "event-retention", events.DefaultRetention, "how long lifecycle events (GET /v1/events) are kept")
}

func (f *eventFlags) validate() error {
	if f.Retention < time.Minute {
		return cli.Usagef("--event-retention %s: want at least 1m", f.Retention)
	}
	return nil
}
