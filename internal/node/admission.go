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

// Admission admits a sandbox of a project as the node records it.
type Admission interface {
	// Admit returns the quota a sandbox of projectID with disk bytes of
	// disk is recorded under (store.CreateAdmitted, which counts the
	// project's holdings and inserts the row in one transaction under
	// the project's lock) and holds what else the admission needs until
	// release, which the node calls once the sandbox is recorded.
	Admit(ctx context.Context, projectID string, disk int64) (q store.Quota, release func(), err error)
}

// Quota is the Admission of Lizard's per-project quotas, kept in the
// database: the count of live sandboxes and the disk promised to them and
// to volumes. It is the same under `lizard serve` and `lizard node`: the
// store counts and inserts in one transaction, under the project's
// advisory lock on PostgreSQL (held from the count to the commit, so that
// several nodes and API processes sharing one database cannot pass a
// quota together) and SQLite's write lock. Different projects never wait
// for each other. The zero value of the bounds admits all.
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

// Lock takes projectID's admission lock: anything else counted against
// the project's disk (a volume's record) holds it, and sandbox admission
// waits for it — in the database (the project's advisory lock, which
// store.CreateAdmitted takes too) and in this process.
func (q *Quota) Lock(ctx context.Context, projectID string) (release func(), err error) {
	unlock := q.locks.Lock(projectID)
	unlockStore, err := q.Store.LockProject(ctx, projectID)
	if err != nil {
		unlock()
		return nil, err
	}
	return func() { unlockStore(); unlock() }, nil
}

// Admit implements Admission. On PostgreSQL it holds nothing itself: the
// project's lock is the record's transaction's, so a project's creates
// wait in one line only for the slot read, the insert and the commit. On
// SQLite, whose one process is the only writer, it holds the project's
// lock in this process, which a volume's record takes too (its count and
// insert are two transactions).
func (q *Quota) Admit(ctx context.Context, projectID string, disk int64) (store.Quota, func(), error) {
	sq := store.Quota{MaxLive: q.MaxLive, MaxDisk: q.MaxDisk, DefaultDisk: q.DefaultDisk, Disk: disk}
	if q.Store.Dialect() == "postgres" {
		return sq, func() {}, nil
	}
	return sq, q.locks.Lock(projectID), nil
}

// Refusal is the error of a create store.CreateAdmitted refused: what the
// project holds and what to do.
func Refusal(e *store.OverQuota) error {
	q := e.Quota
	if q.MaxLive > 0 && e.Live+1 > q.MaxLive {
		return overLive(e.ProjectID, e.Live, 1, q.MaxLive)
	}
	disk := q.Disk
	if disk <= 0 {
		disk = q.DefaultDisk
	}
	return OverDisk(e.ProjectID, e.Promised, fmt.Sprintf("a sandbox of %d MiB", disk>>20), q.MaxDisk)
}

// overLive is the refusal of count more sandboxes to a project that has
// live of its max.
func overLive(projectID string, live, count, max int) error {
	msg := fmt.Sprintf("project %s already has %d live sandboxes, its maximum; kill some first", projectID, live)
	if count > 1 {
		msg = fmt.Sprintf("project %s has %d live sandboxes; %d more would pass its maximum of %d; kill some first",
			projectID, live, count, max)
	}
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second, Msg: msg}
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
			return overLive(projectID, live, count, q.MaxLive)
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
