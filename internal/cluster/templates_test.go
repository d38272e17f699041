package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/template"
)

// heartbeat records node name with the image store and images given.
func heartbeat(t *testing.T, st *store.Store, name string, slots int, imageStore string, images ...string) {
	t.Helper()
	n, err := st.Nodes().Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	n.Slots, n.ImageStore, n.Images, n.LeaseUntil = slots, imageStore, images, time.Now().Add(time.Minute)
	if err := st.Nodes().Heartbeat(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// TestPlacementPrefersHolder: a create whose image a node holds goes to
// that node while it has room, whatever its load; else anywhere.
func TestPlacementPrefersHolder(t *testing.T) {
	st, _, r, _ := newCluster(t, 0, "a", "b", "c")
	ctx := context.Background()
	heartbeat(t, st, "b", 100, "s3://x/y", "snapshots/sn1", "templates/k1")
	for _, tc := range []struct {
		image string
		slots int // b's
		want  string
	}{
		{"templates/k1", 100, "b"},
		{"snapshots/sn1", 100, "b"},
		{"templates/k1", 0, ""}, // b full: a or c, which fetches it
		{"templates/other", 100, ""},
	} {
		heartbeat(t, st, "b", tc.slots, "s3://x/y", "snapshots/sn1", "templates/k1")
		for range 4 {
			n, err := r.place(ctx, nil, tc.image)
			if err != nil {
				t.Fatalf("place(%s): %v", tc.image, err)
			}
			r.done(n.Name)
			if tc.want != "" && n.Name != tc.want || tc.want == "" && tc.slots == 0 && n.Name == "b" {
				t.Errorf("place(%s) with b's slots %d = %s; want %q (\"\": not b when full)", tc.image, tc.slots, n.Name, tc.want)
			}
		}
	}
}

// TestTemplatesUsable: a build is refused, naming the nodes and the
// setting, in a cluster of several live nodes of which one keeps images
// on its own disk; a node alone may, and every node with a store may.
func TestTemplatesUsable(t *testing.T) {
	key, err := template.Key(template.Default)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stores map[string]string
		refuse string
	}{
		{"all with a store", map[string]string{"a": "s3://x/y", "b": "s3://x/y"}, ""},
		{"one on its disk", map[string]string{"a": "s3://x/y", "b": ""}, "b"},
		{"alone on its disk", map[string]string{"a": ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			for n := range tc.stores {
				names = append(names, n)
			}
			st, _, r, _ := newCluster(t, 0, names...)
			for n, s := range tc.stores {
				heartbeat(t, st, n, 100, s)
			}
			got, err := Templates{Router: r}.BaseKey(context.Background(), template.Default)
			switch {
			case tc.refuse == "" && (err != nil || got != key):
				t.Errorf("BaseKey = %q, %v; want key %s", got, err, key)
			case tc.refuse != "" && (!errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "--image-store") || !strings.Contains(err.Error(), tc.refuse)):
				t.Errorf("BaseKey = %v; want unavailable naming node %s and --image-store", err, tc.refuse)
			}
		})
	}
}
