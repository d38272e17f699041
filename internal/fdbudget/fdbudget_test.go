package fdbudget

import (
	"errors"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/errdefs"
	"golang.org/x/sys/unix"
)

func TestTake(t *testing.T) {
	var refused []string
	b := New(30, 12, nil)
	b.Refused = func(k Kind, bound string) { refused = append(refused, string(k)+"/"+bound) }

	// Project a takes its 12: two proxied connections.
	relA1, err := b.Take("a", Egress)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take("a", Egress); err != nil {
		t.Fatal(err)
	}
	// A third, and even a call of 2, is over a's bound.
	for _, k := range []Kind{Egress, Call, Lookup} {
		_, err := b.Take("a", k)
		var e *errdefs.Error
		if !errors.As(err, &e) || !errors.Is(err, errdefs.ErrRateLimited) || e.RetryAfter <= 0 || !strings.Contains(e.Msg, "--max-descriptors-per-project 12") {
			t.Fatalf("project a's %s over its bound: %v; want a rate_limited error naming the flag", k, err)
		}
	}
	// Project b still gets its own: the node's 30 allow 18 more.
	relB, err := b.Take("b", Egress)
	if err != nil {
		t.Fatalf("project b with a at its bound: %v", err)
	}
	if _, err := b.Take("b", Egress); err != nil {
		t.Fatalf("project b's second: %v", err)
	}
	// c meets the node's bound: 24 held, 6 more is 30, 6 past it is not.
	if _, err := b.Take("c", Egress); err != nil {
		t.Fatalf("project c's first: %v", err)
	}
	if _, err := b.Take("c", Egress); err == nil || !strings.Contains(err.Error(), "the node's sandboxes hold 30") {
		t.Fatalf("past the node's bound: %v", err)
	}
	if got, want := strings.Join(refused, " "), "egress/project call/project dns/project egress/node"; got != want {
		t.Errorf("refusals told %q; want %q", got, want)
	}
	// Releasing gives back exactly once.
	relA1()
	relA1()
	if held, total := b.Held("a"); held != 6 || total != 24 {
		t.Errorf("after a release: a holds %d, all %d; want 6 and 24", held, total)
	}
	if _, err := b.Take("a", Egress); err != nil {
		t.Errorf("a after a release: %v", err)
	}
	relB()
	if held, _ := b.Held("b"); held != 6 {
		t.Errorf("b holds %d after one release; want 6", held)
	}
}

func TestNilBudgetAllows(t *testing.T) {
	var b *Budget
	rel, err := b.Take("p", Egress)
	if err != nil {
		t.Fatal(err)
	}
	rel()
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ limit, node, project int }{
		{1 << 20, 1<<20 - 1<<17, 65536},           // the usual nr_open: a reserve of an eighth
		{20000, 20000 - 8192, (20000 - 8192) / 4}, // the red-team's node: the reserve's floor
		{4096, 2048, 512},                         // a small limit: half kept
	} {
		node, project := Split(tc.limit)
		if node != tc.node || project != tc.project {
			t.Errorf("Split(%d) = %d, %d; want %d, %d", tc.limit, node, project, tc.node, tc.project)
		}
	}
}

func TestRaiseLimit(t *testing.T) {
	var before unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	got, err := RaiseLimit()
	if err != nil {
		t.Fatal(err)
	}
	var after unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if uint64(got) != after.Cur || after.Cur < before.Max {
		t.Errorf("RaiseLimit = %d; the limit went from %+v to %+v, want at least the old hard limit", got, before, after)
	}
}
