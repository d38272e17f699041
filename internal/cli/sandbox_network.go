package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lizard-build/lizard/api"
)

func init() {
	sandboxCommands["network"] = subcommand{"network ID [--default allow|deny] [--allow-domain D]... [--deny-domain D]... [--cut] [--log] [--json]   (show, change or log its network policy; docs/network.md)", sandboxNetwork}
	sandboxOrder = append(sandboxOrder, "network")
}

// listFlag is a repeatable flag; set says whether it was given at all.
type listFlag struct {
	vals []string
	set  bool
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

func (l *listFlag) Set(s string) error {
	l.vals, l.set = append(l.vals, s), true
	return nil
}

// networkFlags are the policy flags of create and network.
type networkFlags struct {
	def         string
	allow, deny listFlag
}

func (f *networkFlags) given() bool { return f.def != "" || f.allow.set || f.deny.set }

// policy is the create's network policy, nil when no flag was given.
func (f *networkFlags) policy() *api.NetworkPolicy {
	if !f.given() {
		return nil
	}
	return &api.NetworkPolicy{Default: f.def, Allow: f.allow.vals, Deny: f.deny.vals}
}

func sandboxNetwork(ctx context.Context, e Env, args []string) error {
	fs := NewFlags(e, "sandbox network")
	cf := addClientFlags(fs)
	var nf networkFlags
	fs.StringVar(&nf.def, "default", "", "allow or deny: what names no rule names get")
	fs.Var(&nf.allow, "allow-domain", "a name, *.wildcard or IPv4 prefix to allow (repeatable; replaces the allow rules)")
	fs.Var(&nf.deny, "deny-domain", "a name, *.wildcard or IPv4 prefix to deny (repeatable; replaces the deny rules)")
	cut := fs.Bool("cut", false, "end the sandbox's open connections too")
	showLog := fs.Bool("log", false, "print the sandbox's egress decisions")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return Usagef("usage: lizard sandbox %s", sandboxCommands["network"].usage)
	}
	if *showLog && (nf.given() || *cut) {
		return Usagef("--log prints the log; change the policy in another call")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	id := pos[0]
	if *showLog {
		log, err := c.NetworkLog(ctx, id)
		if err != nil {
			return fmt.Errorf("getting the network log of sandbox %s: %w", id, err)
		}
		if *asJSON {
			return printJSON(e.Stdout, log)
		}
		tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tKIND\tNAME\tADDRESS\tPORT\tVERDICT\tOUT\tIN\tREASON")
		for _, d := range log {
			verdict := "denied"
			if d.Allowed {
				verdict = "allowed"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", d.Time.Local().Format(time.TimeOnly), d.Kind, d.Name, d.Addr, d.Port,
				verdict, d.BytesOut, d.BytesIn, d.Reason)
		}
		return tw.Flush()
	}
	var pol *api.NetworkPolicy
	if nf.given() || *cut {
		u := api.UpdateNetworkRequest{Cut: *cut}
		if nf.def != "" {
			u.Default = &nf.def
		}
		if nf.allow.set {
			u.Allow = &nf.allow.vals
		}
		if nf.deny.set {
			u.Deny = &nf.deny.vals
		}
		if pol, err = c.UpdateNetwork(ctx, id, u); err != nil {
			return fmt.Errorf("changing the network policy of sandbox %s: %w", id, err)
		}
	} else {
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return fmt.Errorf("getting sandbox %s: %w", id, err)
		}
		if pol = sb.Network; pol == nil {
			fmt.Fprintf(e.Stdout, "sandbox %s has no network policy: the server's egress as it is\n", id)
			return nil
		}
	}
	if *asJSON {
		return printJSON(e.Stdout, pol)
	}
	fmt.Fprintf(e.Stdout, "default: %s\nallow:   %s\ndeny:    %s\n", pol.Default, strings.Join(pol.Allow, " "), strings.Join(pol.Deny, " "))
	return nil
}
