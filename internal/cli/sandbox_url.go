package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
)

func init() {
	sandboxCommands["url"] = subcommand{"url ID PORT [--no-token]   (the URL of a server on PORT inside the sandbox; docs/ports.md)", sandboxURL}
	sandboxOrder = append(sandboxOrder, "url")
}

// sandboxURL prints the URL of a port of a sandbox, carrying its access
// token so that a browser can open it (--no-token: the bare URL, for
// clients that send the API key).
func sandboxURL(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox url")
	cf := addClientFlags(fs)
	noToken := fs.Bool("no-token", false, "print the URL without the sandbox's access token")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return Usagef("usage: lizard sandbox url ID PORT [--no-token]")
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil || port < 1 || port > 65535 {
		return Usagef("port %q: want a number from 1 to 65535", pos[1])
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	sb, err := c.GetSandbox(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("getting sandbox %s: %w", pos[0], err)
	}
	u := c.PortURL(sb.SandboxID, port)
	if sb.PortsDomain != "" {
		base, err := url.Parse(c.BaseURL())
		if err != nil {
			return err
		}
		host := strconv.Itoa(port) + "-" + sb.SandboxID + "." + sb.PortsDomain
		if p := base.Port(); p != "" {
			host += ":" + p
		}
		u = base.Scheme + "://" + host + "/"
	}
	if !*noToken && sb.AccessToken != "" && !sb.PublicPorts {
		u += "?lizard_access_token=" + url.QueryEscape(sb.AccessToken)
	}
	fmt.Fprintln(e.Stdout, u)
	return nil
}
