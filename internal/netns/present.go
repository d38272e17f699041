package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// Present is what of sandboxes' networks exists on this host now, by
// sandbox ID: what `lizard admin check` compares with the sandboxes that
// should hold them. Spares (spares.go) are no sandbox's and not listed.
type Present struct {
	Namespaces map[string]bool // lizard-ID under Dir
	Tables     map[string]bool // nftables inet lizard-ID
	links      map[string]bool // every link's name
}

// Veth reports whether sandbox id's host veth exists.
func (p Present) Veth(id string) bool { return p.links[VethName(id)] }

// ReadPresent lists the namespaces, links and nftables tables of this host
// once, however many sandboxes are asked about.
func ReadPresent() (Present, error) {
	p := Present{Namespaces: map[string]bool{}, Tables: map[string]bool{}, links: map[string]bool{}}
	ents, err := os.ReadDir(Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("listing network namespaces: %w", err)
	}
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), Prefix); ok && !strings.HasPrefix(id, "spare.") {
			p.Namespaces[id] = true
		}
	}
	links, err := retryDump(netlink.LinkList)
	if err != nil {
		return p, fmt.Errorf("listing links: %w", err)
	}
	for _, l := range links {
		p.links[l.Attrs().Name] = true
	}
	c, err := nftables.New()
	if err != nil {
		return p, fmt.Errorf("listing nftables tables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return p, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if id, ok := strings.CutPrefix(t.Name, Prefix); ok {
			p.Tables[id] = true
		}
	}
	return p, nil
}
