package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/cluster"
	"github.com/lizard-build/lizard/internal/cluster/remote"
	"github.com/lizard-build/lizard/internal/events"
	"github.com/lizard-build/lizard/internal/imagestore"
	"github.com/lizard-build/lizard/internal/imagestore/disk"
	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/server"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/version"
)

// A simulated node is `lizard node` with the runtime taken out: the real
// node.Local (admission, the rows it records, its reaper, its events), the
// real internal API (remote.Handler, behind the cluster secret) on its own
// loopback port, and the real lease (cluster.Member), under its own name.
// Its runtime is the tests' in-memory fake (sandboxtest.Fake), and every
// sandbox's agent is one fake agent (agent below) that answers after a
// fixed delay. So the api processes see what a real node shows them; what
// is not simulated is the machine: no gVisor, no network namespace, no
// image on disk.
//
// Many run in one process. They share the process's store pools (one per
// few nodes, not one each: 500 nodes × 16 connections is past any
// PostgreSQL's max_connections), which is the one way they differ from
// real nodes on the wire to the database.

// simConfig is what every simulated node of a fleet shares.
type simConfig struct {
	Secret string
	Lease  time.Duration
	// Agent is the host:port of the fake agent every sandbox's calls go to.
	Agent string
	// Dir holds each node's data directory.
	Dir string
	// MaxLive is each project's live sandboxes, as the node admits them
	// (--max-sandboxes-per-project; 0: no bound).
	MaxLive int
	Log     *slog.Logger
	// Images, when set, is the image store every node shares (as lizard
	// node's --image-store), so that a node can be drained; ImageStore
	// is its URL, as the nodes register it.
	Images     *imagestore.Store
	ImageStore string
}

// shareImages gives the nodes one image store, as lizard node's
// --image-store, so that a node can be drained: a directory at root,
// sealed with secret (the secrets key).
func (c *simConfig) shareImages(root string, secret []byte) error {
	key, err := imagestore.NewKey(secret)
	if err != nil {
		return err
	}
	c.Images, c.ImageStore = imagestore.New(&disk.Bucket{Root: root}, key), "file://"+root
	return nil
}

// simNode is one simulated node.
type simNode struct {
	Name    string
	Addr    string // its internal API's host:port
	Runtime *sandboxtest.Fake
	Node    *node.Local
	cancel  context.CancelFunc
	done    chan struct{}
}

// startSimNode registers and serves a simulated node called name, with
// the database pool shared (its view of it is its own: shared.OnNode).
// It runs until Stop or Kill, or until ctx ends.
func startSimNode(ctx context.Context, cfg simConfig, shared *store.Store, name string) (*simNode, error) {
	dataDir := filepath.Join(cfg.Dir, name)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	pool, err := netns.NewPool(netns.DefaultPool)
	if err != nil {
		return nil, err
	}
	st := shared.OnNode(name)
	log := cfg.Log.With("node", name)
	rt := sandboxtest.NewFake()
	ncfg := node.Config{
		Runtime: rt, Store: st, Pool: pool, Logger: log,
		Artifact: func(_ context.Context, template string) (sandbox.Artifact, error) {
			return sandbox.Artifact{Name: template, Key: "sim", RootFS: "/nonexistent"}, nil
		},
		DataDir:   dataDir,
		AgentAddr: func(string, string) string { return cfg.Agent },
		Admission: &node.Quota{Store: shared, MaxLive: cfg.MaxLive},
	}
	if cfg.Images != nil {
		cache, err := imagestore.NewCache(cfg.Images, filepath.Join(dataDir, "image-cache"), 1<<30, log)
		if err != nil {
			return nil, err
		}
		ncfg.Images, ncfg.ImageCache = cfg.Images, cache
	}
	n, err := node.New(ncfg)
	if err != nil {
		return nil, err
	}
	// As `lizard node`: its lifecycle events go to the shared database.
	n.Subscribe((&events.Recorder{Store: shared, Log: log}).Handle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	if err := n.Reconcile(ctx); err != nil {
		cancel()
		ln.Close()
		return nil, fmt.Errorf("node %s: reconciling: %w", name, err)
	}
	s := &simNode{Name: name, Addr: ln.Addr().String(), Runtime: rt, Node: n, cancel: cancel, done: make(chan struct{})}
	h := remote.Handler(remote.HandlerConfig{Node: n, Secret: cfg.Secret, Logger: log, DataDir: dataDir,
		Peers: func(ctx context.Context, peer string) (string, error) {
			p, err := shared.Nodes().Get(ctx, peer)
			return p.Addr, err
		}})
	member := &cluster.Member{Store: shared, Name: name, Addr: s.Addr, Slots: pool.Slots(), Lease: cfg.Lease, Log: log, Version: version.Version,
		ImageStore: cfg.ImageStore}
	// The first beat before serving: the node is placeable on return.
	if err := member.Beat(ctx, time.Now()); err != nil {
		cancel()
		ln.Close()
		return nil, fmt.Errorf("node %s: first lease: %w", name, err)
	}
	go n.RunReaper(ctx)
	if cfg.Images != nil {
		go n.RunUploader(ctx)
	}
	go member.Run(ctx)
	go func() {
		defer close(s.done)
		server.Run(ctx, ln, h, log)
	}()
	return s, nil
}

// Kill ends the node as kill -9 would: it stops serving and renewing its
// lease at once, and tells no one.
func (s *simNode) Kill() {
	s.cancel()
	<-s.done
}

// agent is a fake lizard-agent for every simulated sandbox: /execute
// answers `2` after delay, the readiness and health checks at once.
func agent(delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/execute":
			io.Copy(io.Discard, r.Body)
			time.Sleep(delay)
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"type":"result","result":{"type":"result","mime":"text/plain","data":"2"}}`+"\n"+`{"type":"end"}`+"\n")
		case "/health":
			json.NewEncoder(w).Encode(api.Health{Status: "ok"})
		case api.AgentReadyPath, api.AgentReseedPath:
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	})
}
