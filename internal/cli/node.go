package cli

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/lizard-build/lizard/client"
)

// EnvClusterSecret is the cluster's shared secret (docs/cluster.md), the
// credential of the node commands.
const EnvClusterSecret = "LIZARD_CLUSTER_SECRET"

// EnvNodeName is a node's name in its own environment (lizard node --name's default).
const EnvNodeName = "LIZARD_NODE_NAME"

// NodeCommand runs `lizard node drain|undrain NAME` and `lizard node list` against a cluster's
// `lizard api` (LIZARD_API_URL or --api-url) with the cluster secret from
// the environment (never a flag, which shows in ps).
func NodeCommand(ctx context.Context, e Env, verb string, args []string) error {
	fs := NewFlags(e, "node "+verb)
	apiURL := fs.String("api-url", "", "the cluster's lizard api URL (default $"+client.EnvAPIURL+")")
	asJSON := fs.Bool("json", false, "print the API's answer as JSON")
	names, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if verb == "list" {
		return listNodes(ctx, e, *apiURL, *asJSON, names)
	}
	if len(names) == 0 && os.Getenv(EnvNodeName) != "" {
		// A node's own host or pod may drain it (a hook before its
		// stop), where the environment names it.
		names = []string{os.Getenv(EnvNodeName)}
	}
	if len(names) != 1 {
		return Usagef("usage: lizard node %s NAME [--api-url URL] [--json] (with %s set; NAME defaults to $%s)", verb, EnvClusterSecret, EnvNodeName)
	}
	c, err := nodeClient(*apiURL)
	if err != nil {
		return err
	}
	if verb == "undrain" {
		s, err := c.UndrainNode(ctx, names[0])
		if err != nil {
			return fmt.Errorf("undraining node %s: %w", names[0], err)
		}
		if *asJSON {
			return printJSON(e.Stdout, s)
		}
		fmt.Fprintf(e.Stdout, "node %s takes new sandboxes again\n", s.Node)
		return nil
	}
	d, err := c.DrainNode(ctx, names[0])
	if err != nil {
		return fmt.Errorf("draining node %s: %w", names[0], err)
	}
	if *asJSON {
		return printJSON(e.Stdout, d)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tFROM\tTO\tRESUMED\tDOWNTIME")
	for _, m := range d.Moved {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d ms\n", m.SandboxID, m.From, m.To, m.Resumed, m.DowntimeMs)
	}
	tw.Flush()
	for _, l := range d.Left {
		fmt.Fprintf(e.Stdout, "left %s on %s: %s\n", l.SandboxID, d.Node, l.Reason)
	}
	fmt.Fprintf(e.Stdout, "node %s drained in %d ms: %d moved, %d left; it takes no new sandboxes until `lizard node undrain %s`\n",
		d.Node, d.TookMs, len(d.Moved), len(d.Left), d.Node)
	return nil
}

// nodeClient is a client of the cluster's API with the cluster secret.
func nodeClient(apiURL string) (*client.Client, error) {
	secret := os.Getenv(EnvClusterSecret)
	if secret == "" {
		return nil, Usagef("set %s to the cluster's secret: listing and draining nodes takes it, not an API key", EnvClusterSecret)
	}
	return client.New(client.Config{BaseURL: apiURL, APIKey: secret})
}

// listNodes is `lizard node list`: each node's version, and whether this
// api places sandboxes on it.
func listNodes(ctx context.Context, e Env, apiURL string, asJSON bool, args []string) error {
	if len(args) != 0 {
		return Usagef("usage: lizard node list [--api-url URL] [--json] (with %s set)", EnvClusterSecret)
	}
	c, err := nodeClient(apiURL)
	if err != nil {
		return err
	}
	l, err := c.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	if asJSON {
		return printJSON(e.Stdout, l)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tVERSION\tCOMPATIBLE\tLIVE\tDRAINING\tSANDBOXES")
	for _, n := range l.Nodes {
		v := n.Version
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\t%v\t%d/%d\n", n.Name, n.Addr, v, n.Compatible, n.Live, n.Draining, n.Sandboxes, n.Slots)
	}
	return tw.Flush()
}
