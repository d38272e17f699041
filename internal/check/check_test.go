package check

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/recipe"
	"github.com/lizard-build/lizard/internal/sandbox/gvisor"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/testenv"
	"github.com/lizard-build/lizard/internal/volume"
)

// TestCheckAndRepair plants each kind of leftover in a fresh data
// directory and on this host, beside what must stay — a running sandbox's
// network, a paused sandbox's image, a snapshot's, a volume of the store, a
// template build in use, the network of another Lizard's sandbox (one
// whose ID this store has too, as a restored backup's would), the runsc
// builds and agent copies an image, a sandbox or the server names — and checks
// that check lists exactly the leftovers and --repair removes exactly
// those.
func TestCheckAndRepair(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx := context.Background()
	data := t.TempDir()
	cache := t.TempDir()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateProject(ctx, "p", time.Now()))
	n, releasePool, err := testenv.TakePool()
	must(err)
	t.Cleanup(releasePool)
	// IDs unique to this run: the names below are machine-wide.
	suffix := fmt.Sprintf("%x", time.Now().UnixNano())[:10]
	id := func(name string) string { return name + suffix }
	var (
		running = id("ckrun")
		ended   = id("ckend")
		gone    = id("ckgone")
		kept    = id("ckkept")
		other   = id("ckother")  // another Lizard's: no row here
		shared  = id("ckshared") // a row here, its names another Lizard's
	)
	slot := 0
	row := func(id, state string) {
		t.Helper()
		sb := &store.Sandbox{ID: id, ProjectID: "p", Template: "interpreter", State: api.StateStarting, CreatedAt: time.Now()}
		must(st.CreateSandbox(ctx, sb, 60, func(s int) (string, string) { return "10.0.0.1", "10.0.0.2" }))
		must(st.MarkRunning(ctx, id, nil))
		switch state {
		case api.StatePaused:
			must(st.PauseSandbox(ctx, id, filepath.Join(data, "images", id), nil, time.Now(), true))
		case api.StateKilled:
			must(st.EndSandbox(ctx, id, api.StateKilled, "test", time.Now()))
		}
	}
	ours := filepath.Join(data, "gvisor")
	theirs := filepath.Join(t.TempDir(), "gvisor")
	// network plants id's namespace, veth and nftables table, recorded as
	// the runtime dir owner's (with its sandbox directory, so that no
	// Runtime starting meanwhile takes them for a dead server's).
	network := func(id, owner string) {
		t.Helper()
		must(os.MkdirAll(filepath.Join(owner, "sandboxes", id), 0o700))
		must(os.MkdirAll(gvisor.OwnersDir, 0o700))
		must(os.WriteFile(filepath.Join(gvisor.OwnersDir, id), []byte(owner+"\n"), 0o600))
		t.Cleanup(func() { os.Remove(filepath.Join(gvisor.OwnersDir, id)) })
		slot++
		l := netns.Link{HostAddr: netip.MustParseAddr(fmt.Sprintf("169.254.%d.%d", n, 4*slot+1)),
			GuestAddr: netip.MustParseAddr(fmt.Sprintf("169.254.%d.%d", n, 4*slot+2)), PrefixLen: 30}
		must(netns.CreateWithEgress(id, l, &netns.Egress{}))
		t.Cleanup(func() { netns.Remove(id) })
	}
	cgroups := func(id string) []string {
		var dirs []string
		for _, c := range []string{"cpu", "memory"} {
			d := filepath.Join("/sys/fs/cgroup", c, "lizard", id)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatalf("planting a cgroup: %v", err)
			}
			t.Cleanup(func() { os.Remove(d) })
			dirs = append(dirs, d)
		}
		return dirs
	}
	file := func(rel string) string {
		p := filepath.Join(data, rel)
		must(os.MkdirAll(filepath.Dir(p), 0o700))
		must(os.WriteFile(p, []byte("x"), 0o600))
		return p
	}

	// What must stay.
	row(running, api.StateRunning)
	network(running, ours)
	row(kept, api.StatePaused)
	file("images/" + kept + "/pages.img")
	must(st.CreateSnapshot(ctx, store.Snapshot{ID: "snap_ok" + suffix, ProjectID: "p", SandboxID: kept, Template: "interpreter",
		CreatedAt: time.Now(), ImageDir: filepath.Join(data, "snapshots", "snap_ok"+suffix)}))
	file("snapshots/snap_ok" + suffix + "/pages.img")
	network(other, theirs)
	row(shared, api.StateKilled)
	network(shared, theirs)
	vols := &volume.Manager{Dir: filepath.Join(data, "volumes")}
	must(st.Volumes().Create(ctx, store.Volume{ID: "vol_kept", ProjectID: "p", Name: "kept", SizeBytes: volume.MinBytes, CreatedAt: time.Now()}))
	must(vols.Create(ctx, "vol_kept", volume.MinBytes))
	b := recipe.New(recipe.Config{CacheDir: cache, DataDir: data})
	const usedKey, unusedKey = "00000000000000b1", "00000000000000b2"
	must(st.Templates().Put(ctx, store.Template{ProjectID: "p", Name: "t", Key: usedKey, Base: "interpreter", Recipe: "{}", CreatedAt: time.Now()}))
	for _, k := range []string{usedKey, unusedKey} {
		must(os.MkdirAll(filepath.Join(cache, "templates", recipe.LayerKey(k), "rootfs"), 0o700))
		must(b.Hold(k))
	}

	// Kept runsc builds and agent copies: named by the paused sandbox's
	// image, the snapshot's, a template snapshot, the running sandbox, the
	// server (its build, its agent); 0.1.0's agent, put by the operator.
	build := func(c byte) string { return "gvisor-" + strings.Repeat(string(c), 16) }
	files := func(c byte) string { return "0.1.1-" + strings.Repeat(string(c), 16) }
	record := func(rel string, c byte) {
		must(os.WriteFile(file(rel), []byte(`{"runsc":"`+build(c)+`","files":{"/opt/lizard/lizard-agent":"`+files(c)+`/lizard-agent"}}`), 0o600))
	}
	record("images/"+kept+"/lizard-runtime.json", 'a')
	record("snapshots/snap_ok"+suffix+"/lizard-runtime.json", 'b')
	record("templates/interpreter-0123/lizard-runtime.json", 'c')
	record("gvisor/sandboxes/"+running+"/runtime.json", 'd')
	file("gvisor/runsc/current")
	must(os.WriteFile(filepath.Join(data, "gvisor/runsc/current"), []byte(build('e')+"\n"), 0o600))
	agent := file("bin/lizard-agent")
	agentKey, err := gvisor.FilesKey(agent)
	must(err)
	for _, c := range []byte("abcdef") {
		file("gvisor/runsc/" + build(c) + "/runsc")
		file("gvisor/files/" + files(c) + "/lizard-agent")
	}
	file("gvisor/files/" + agentKey + "/lizard-agent")
	file("gvisor/files/0.1.0/lizard-agent")

	// The leftovers.
	want := map[string]bool{}
	want[RunscUnused+" "+filepath.Join(data, "gvisor/runsc", build('f'))] = true
	want[FilesUnused+" "+filepath.Join(data, "gvisor/files", files('e'))] = true
	want[FilesUnused+" "+filepath.Join(data, "gvisor/files", files('f'))] = true
	row(ended, api.StateKilled)
	network(ended, ours)
	want[Namespace+" "+netns.Name(ended)] = true
	want[Veth+" "+netns.VethName(ended)] = true
	want[Table+" inet "+netns.TableName(ended)] = true
	for _, d := range cgroups(ended) {
		want[Cgroup+" "+d] = true
	}
	cgroups(other) // another's: not listed
	row(gone, api.StatePaused)
	want[RowWithoutImage+" paused sandbox "+gone] = true
	must(st.CreateSnapshot(ctx, store.Snapshot{ID: "snap_gone" + suffix, ProjectID: "p", SandboxID: kept, Template: "interpreter",
		CreatedAt: time.Now(), ImageDir: filepath.Join(data, "snapshots", "snap_gone"+suffix)}))
	want[RowWithoutImage+" snapshot snap_gone"+suffix] = true
	want[ImageWithoutRow+" "+filepath.Dir(file("images/orphan/pages.img"))] = true
	want[ImageWithoutRow+" "+filepath.Dir(file("snapshots/orphan/pages.img"))] = true
	orphanVol := file("volumes/vol_orphan.img")
	must(os.Truncate(orphanVol, 1<<20))
	want[VolumeWithoutRow+" "+filepath.Join(data, "volumes", "vol_orphan")] = true
	out, err := exec.Command("losetup", "-f", "--show", orphanVol).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { detach(loop) })
	want[LoopDevice+" "+loop] = true
	must(vols.Mount(ctx, "vol_kept"))
	t.Cleanup(func() { vols.Unmount("vol_kept") })
	want[VolumeMounted+" "+vols.Path("vol_kept")] = true
	want[TemplateBuildUnused+" "+filepath.Join(cache, "templates", recipe.LayerKey(unusedKey))] = true
	// Step cache entries: one of template t (kept), one of deleted
	// template gone (listed), one of another data directory's (not).
	holder := func(dataDir string) string { sum := sha256.Sum256([]byte(dataDir)); return hex.EncodeToString(sum[:8]) }
	for key, users := range map[string]string{
		"00000000000000c1": `[{"holder":"` + holder(data) + `","project":"p","template":"t"}]`,
		"00000000000000c2": `[{"holder":"` + holder(data) + `","project":"p","template":"gone"}]`,
		"00000000000000c3": `[{"holder":"` + holder("/elsewhere") + `","project":"p","template":"gone"}]`,
	} {
		dir := filepath.Join(cache, "template-steps", key)
		must(os.MkdirAll(filepath.Join(dir, "rootfs"), 0o700))
		must(os.WriteFile(filepath.Join(dir, "entry.json"), []byte(`{"key":"`+key+`","step":1,"sizeBytes":0,"users":`+users+`}`), 0o600))
	}
	want[TemplateStepsUnused+" "+filepath.Join(cache, "template-steps")+" (p/gone: 1 entries, 0 MiB)"] = true

	cfg := Config{DataDir: data, CacheDir: cache, Store: st, Files: []string{agent}}
	found, err := Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range found {
		got[f.Kind+" "+f.What] = true
		if f.Why == "" {
			t.Errorf("%s %s says no why", f.Kind, f.What)
		}
	}
	if d := diff(got, want); d != "" {
		t.Fatalf("check listed:\n%s", d)
	}
	for _, f := range found {
		if err := f.Repair(ctx); err != nil {
			t.Error(err)
		}
	}
	if again, err := Check(ctx, cfg); err != nil || len(again) != 0 {
		t.Errorf("check after --repair = %+v, %v; want nothing", again, err)
	}

	// What must stay, stayed.
	present, err := netns.ReadPresent()
	must(err)
	for _, id := range []string{running, other, shared} {
		if !present.Namespaces[id] || !present.Veth(id) || !present.Tables[id] {
			t.Errorf("the network of %s was removed", id)
		}
	}
	if present.Namespaces[ended] || present.Veth(ended) || present.Tables[ended] {
		t.Errorf("the network of %s is still there", ended)
	}
	if len(gvisor.Cgroups(other)) != 2 || len(gvisor.Cgroups(ended)) != 0 {
		t.Errorf("cgroups after repair: other's %v (want 2), ended's %v (want none)", gvisor.Cgroups(other), gvisor.Cgroups(ended))
	}
	for _, p := range []string{"images/" + kept + "/pages.img", "snapshots/snap_ok" + suffix + "/pages.img", "volumes/vol_kept.img"} {
		if _, err := os.Stat(filepath.Join(data, p)); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	for _, c := range []byte("abcde") {
		if _, err := os.Stat(filepath.Join(data, "gvisor/runsc", build(c), "runsc")); err != nil {
			t.Errorf("runsc build %s was removed: %v", build(c), err)
		}
	}
	for _, k := range []string{files('a'), files('b'), files('c'), files('d'), agentKey, "0.1.0"} {
		if _, err := os.Stat(filepath.Join(data, "gvisor/files", k, "lizard-agent")); err != nil {
			t.Errorf("the agent copy %s was removed: %v", k, err)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "gvisor/runsc", build('f'))); err == nil {
		t.Error("the runsc build nothing names is still there")
	}
	if _, err := os.Stat(filepath.Join(cache, "templates", recipe.LayerKey(usedKey))); err != nil {
		t.Errorf("the build in use was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "templates", recipe.LayerKey(unusedKey))); err == nil {
		t.Error("the unused build is still there")
	}
	for key, stays := range map[string]bool{"00000000000000c1": true, "00000000000000c2": false, "00000000000000c3": true} {
		if _, err := os.Stat(filepath.Join(cache, "template-steps", key)); (err == nil) != stays {
			t.Errorf("step cache entry %s: present %v after repair, want %v", key, err == nil, stays)
		}
	}
	if keys := b.Holds(); len(keys) != 1 || keys[0] != usedKey {
		t.Errorf("held builds after repair = %v, want only %s", keys, usedKey)
	}
	if sb, err := st.GetSandbox(ctx, gone); err != nil || sb.State != api.StateFailed {
		t.Errorf("the paused sandbox without its image = %+v, %v; want failed", sb, err)
	}
	if _, err := st.GetSnapshot(ctx, "snap_gone"+suffix); err == nil {
		t.Error("the snapshot without its image is still recorded")
	}
	if sb, err := st.GetSandbox(ctx, kept); err != nil || sb.State != api.StatePaused {
		t.Errorf("the paused sandbox with its image = %+v, %v; want paused", sb, err)
	}
}

func diff(got, want map[string]bool) string {
	var lines []string
	for k := range got {
		if !want[k] {
			lines = append(lines, "  unexpected: "+k)
		}
	}
	for k := range want {
		if !got[k] {
			lines = append(lines, "  missing:    "+k)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
