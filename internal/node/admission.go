package node

// Admission: a project's quotas are enforced where its sandboxes are
// recorded, so that no path that makes one (boot, template snapshot, warm
// claim, snapshot restore, each copy of a fork, on any node) can pass them.
// The control plane only refuses early what would not fit (Quota.Fits).

import (
	"context"
	"fmt"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/keylock"
	"github.com/lizard-build/lizard/internal/store"
)

// Admission admits a sandbox of a project just before the node records it.
type Admission interface {
	// Admit checks projectID's quotas for one more sandbox of disk bytes of
	// disk and holds the project's lock until release, which the node
	// calls once the sandbox is recorded: concurrent creates are thus
	// counted one after the other.
	Admit(ctx context.Context, projectID string, disk int64) (release func(), err error)
}

// Quota is the Admission of Lizard's per-project quotas, kept in the
// database: the count of live sandboxes and the disk promised to them and
// to volumes. It is the same under `lizard serve` and `lizard node`; only
// its lock differs by store: a project's lock in this process, and under
// it the project's advisory lock in PostgreSQL (store.LockProject), held
// from the count to the insert, so that several nodes and API processes
// sharing one database cannot pass a quota together. Different projects
// never wait for each other. The zero value of the bounds admits all.
type Quota struct {
	Store *store.Store
	// MaxLive is how many live sandboxes a project may have (0: no bound).
	MaxLive int
	// MaxDisk is the disk a project may be promised, its live sandboxes'
	// disk limits and its volumes' sizes added up (0: no bound);
	// DefaultDisk is the disk of sandboxes recorded without one.
	MaxDisk     int64
	DefaultDisk int64

	locks keylock.Map
}

var _ Admission = (*Quota)(nil)

// Lock takes projectID's admission lock: sandbox admission holds it, and so
// must anything else counted against the project's disk (a volume's
// record).
func (q *Quota) Lock(ctx context.Context, projectID string) (release func(), err error) {
	unlock := q.locks.Lock(projectID)
	unlockStore, err := q.Store.LockProject(ctx, projectID)
	if err != nil {
		unlock()
		return nil, err
	}
	return func() { unlockStore(); unlock() }, nil
}

// Admit implements Admission.
func (q *Quota) Admit(ctx context.Context, projectID string, disk int64) (func(), error) {
	release, err := q.Lock(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if err := q.Fits(ctx, projectID, 1, disk); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// Fits checks that projectID may have count more sandboxes of disk bytes
// of disk each, without taking its lock: an early refusal, before anything
// is made (a fork past the quota would otherwise restore the copies that
// fit only to kill them). Each sandbox is still admitted as it is
// recorded.
func (q *Quota) Fits(ctx context.Context, projectID string, count int, disk int64) error {
	if q.MaxLive > 0 {
		live, err := q.Store.CountProjectLive(ctx, projectID)
		if err != nil {
			return err
		}
		if live+count > q.MaxLive {
			msg := fmt.Sprintf("project %s already has %d live sandboxes, its maximum; kill some first", projectID, live)
			if count > 1 {
				msg = fmt.Sprintf("project %s has %d live sandboxes; %d more would pass its maximum of %d; kill some first",
					projectID, live, count, q.MaxLive)
			}
			return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second, Msg: msg}
		}
	}
	if disk <= 0 {
		disk = q.DefaultDisk
	}
	what := fmt.Sprintf("a sandbox of %d MiB", disk>>20)
	if count > 1 {
		what = fmt.Sprintf("%d more sandboxes of %d MiB each", count, disk>>20)
	}
	return q.DiskRoom(ctx, projectID, int64(count)*disk, what)
}

// DiskRoom checks that projectID may be promised extra bytes of disk more,
// asked for by what ("a volume of 64 MiB"), within MaxDisk.
func (q *Quota) DiskRoom(ctx context.Context, projectID string, extra int64, what string) error {
	if q.MaxDisk <= 0 {
		return nil
	}
	p, err := q.Store.Volumes().PromisedDisk(ctx, projectID, q.DefaultDisk)
	if err != nil {
		return err
	}
	if p.Total()+extra > q.MaxDisk {
		return OverDisk(projectID, p, what, q.MaxDisk)
	}
	return nil
}
