package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestClusterShareHeapImage: with --share-heap, a paused sandbox's image
// holds its template's heap, so it resumes on another node, whose
// template snapshot shared a heap of its own: the durable pause uploads
// the heap's data (not its holes), node A dies, and node B keeps the
// image's heap and restores the sandbox with its state and its kernel
// mapping the heap from the file. Before images held the heap, B refused
// the resume (409: the heap not kept there). The heap goes to the store
// once: a second durable pause on A uploads its image alone.
func TestClusterShareHeapImage(t *testing.T) {
	testenv.RequiresRoot(t)
	s3 := testenv.S3Server(t)
	c, cl := startClusterWith(t, 2, 1, sealedStoreEnv(s3), []string{"--image-store", "s3://" + s3.Bucket + "/cluster", "--template-snapshot=true", "--share-heap"}, nil)
	ctx := context.Background()
	for _, n := range c.nodes {
		n.waitLog(t, 1, "template heap shared")
		n.waitLog(t, 1, "template snapshot made")
	}

	sb := newSandbox(t, cl[0], api.CreateSandboxRequest{TimeoutMs: ms(600_000)})
	a := c.nodeOf(sb.SandboxID)
	run(t, cl[0], sb.SandboxID, "python", "x = 41")
	p, err := cl[0].PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true})
	if err != nil || !p.Durable {
		t.Fatalf("pause waitDurable = %+v, %v; want durable", p, err)
	}
	stored := logField(t, c.node(a).logs(), "stored", "template heap shared")
	ups := uploads(t, c.node(a).logs(), "paused/"+sb.SandboxID)
	t.Logf("node %s: template heap %s bytes, %s stored; the durable pause uploaded %d bytes (%d of them the heap)", a,
		logField(t, c.node(a).logs(), "bytes", "template heap shared"), stored, ups[0][0]+ups[0][1], ups[0][1])
	if len(ups) != 1 || ups[0][0] <= 0 || ups[0][1] < 10<<20 {
		t.Fatalf("the pause's uploads (image, shared): %v; want one, the heap's data with it", ups)
	}

	// Paused again, the template's heap is in the store already: the
	// image alone goes (9.8 MB; 82.4 MB when every image carried it).
	if _, err := cl[0].ResumeSandbox(ctx, sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	run(t, cl[0], sb.SandboxID, "python", "x = x")
	if p, err := cl[0].PauseSandboxWith(ctx, sb.SandboxID, api.PauseRequest{WaitDurable: true}); err != nil || !p.Durable {
		t.Fatalf("second pause waitDurable = %+v, %v; want durable", p, err)
	}
	if c.nodeOf(sb.SandboxID) != a {
		t.Fatalf("the sandbox moved from node %s before A was killed", a)
	}
	ups = uploads(t, c.node(a).logs(), "paused/"+sb.SandboxID)
	if len(ups) != 2 {
		t.Fatalf("the pauses' uploads: %v; want two", ups)
	}
	t.Logf("the second durable pause uploaded %d bytes (%d of them the heap)", ups[1][0]+ups[1][1], ups[1][1])
	if ups[1][1] != 0 || ups[1][0] > ups[0][1] {
		t.Fatalf("the second pause uploaded %d bytes of image and %d of heap; want the image alone, less than the heap's %d", ups[1][0], ups[1][1], ups[0][1])
	}

	c.lose(t, a)

	if ex := run(t, cl[0], sb.SandboxID, "python", "x + 1"); len(ex.Results) == 0 || ex.Results[0].Data != "42" {
		t.Fatalf("x + 1 after resuming on another node = %+v; want 42", ex.Results)
	}
	b := c.nodeOf(sb.SandboxID)
	if b == a {
		t.Fatalf("sandbox still on lost node %s", a)
	}
	maps := "print(sum(1 for l in open('/proc/self/maps') if l.rstrip().endswith('" + api.HeapMount + "/" + api.HeapFile + "')))"
	if n, _ := strconv.Atoi(strings.TrimSpace(runPy(t, cl[0], sb.SandboxID, maps))); n < 50 {
		t.Errorf("the resumed kernel maps %d regions from the heap file; want its preloads' heap", n)
	}
	kept, _ := filepath.Glob(filepath.Join(c.node(b).dataDir, "gvisor", "files", "heap-*"))
	moved := c.node(b).logged(`msg="kept the heap an image holds"`)
	t.Logf("node %s keeps heaps %v; kept the image's: %v", b, kept, moved)
	if !moved && len(kept) != 1 {
		t.Errorf("node %s keeps %v and did not keep the image's heap", b, kept)
	}
	if moved && len(kept) != 2 {
		t.Errorf("node %s keeps %v; want its template's and the image's", b, kept)
	}
}

// uploads are the bytes of each upload of image in a node's logs: the
// image's object and the shared objects it sent.
func uploads(t *testing.T, logs, image string) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="image uploaded to the image store"`) || !strings.Contains(line, "image="+image+" ") {
			continue
		}
		size, _ := strconv.ParseInt(logField(t, line, "size_bytes"), 10, 64)
		shared, _ := strconv.ParseInt(logField(t, line, "shared_uploaded_bytes"), 10, 64)
		out = append(out, [2]int64{size, shared})
	}
	return out
}
