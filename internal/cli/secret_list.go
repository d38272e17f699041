package cli

import (
	"context"
	"fmt"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

func init() {
	secretCommands["list"] = subcommand{"list [--json]", listCommand("secret", func(ctx context.Context, c *client.Client) (table, error) {
		ss, err := c.ListSecrets(ctx)
		t := table{json: api.SecretList{Secrets: ss}, header: "NAME\tCREATED\tUPDATED"}
		for _, s := range ss {
			t.rows = append(t.rows, fmt.Sprintf("%s\t%s\t%s\n", s.Name, formatTime(&s.CreatedAt), formatTime(&s.UpdatedAt)))
		}
		return t, err
	})}
}
