package cli

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/internal/mcp"
)

func init() {
	register("mcp", "serve the Model Context Protocol over stdio for desktop and CLI agents (docs/mcp.md)", runMCP)
}

// runMCP serves one MCP session on stdin/stdout until the client hangs up.
// Stdout is the protocol's: nothing else may be written there.
func runMCP(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "mcp")
	cf := addClientFlags(fs)
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return Usagef("usage: lizard mcp [--api-url URL] [--api-key KEY]")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	return mcp.NewServer(c, "").Run(ctx, &sdk.StdioTransport{})
}
