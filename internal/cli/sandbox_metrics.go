package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"
)

func init() {
	sandboxCommands["metrics"] = subcommand{"metrics ID [--json]   (CPU, memory and disk of the last minutes)", sandboxMetrics}
	sandboxOrder = append(sandboxOrder, "metrics")
}

func sandboxMetrics(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox metrics")
	cf := addClientFlags(fs)
	asJSON := fs.Bool("json", false, "print the samples as JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard sandbox metrics ID [--json]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	ms, err := c.Metrics(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("getting the metrics of sandbox %s: %w", pos[0], err)
	}
	if *asJSON {
		return printJSON(e.Stdout, ms)
	}
	if len(ms) == 0 {
		fmt.Fprintf(e.Stdout, "no samples yet: a running sandbox is sampled every 5 s\n")
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tCPU\tMEMORY\tDISK")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%.1f%% of %g\t%s / %s\t%s / %s\n", m.Timestamp.Local().Format(time.TimeOnly), m.CPUUsedPct, m.CPUCount,
			mib(m.MemUsed), mib(m.MemTotal), mib(m.DiskUsed), mib(m.DiskTotal))
	}
	return tw.Flush()
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
