package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	secretCommands["list"] = subcommand{"list [--json]", listCommand("secret", func(ctx context.Context, c *client.Client) (table, error) {
		ss, err := c.Secrets().List(ctx)
		t := table{json: api.SecretList{Secrets: ss}, header: "NAME\tHOSTS\tCREATED\tUPDATED"}
		for _, s := range ss {
			hosts := strings.Join(s.Hosts, ",")
			switch {
			case hosts == "":
				hosts = "(none: set it again with --host)"
			case s.AllowHTTP:
				hosts += " (http too)"
			}
			t.rows = append(t.rows, fmt.Sprintf("%s\t%s\t%s\t%s\n", s.Name, hosts, formatTime(&s.CreatedAt), formatTime(&s.UpdatedAt)))
		}
		return t, err
	})}
}
