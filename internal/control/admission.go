package control

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// limiter is projectID's create rate; the caller holds admitMu.
func (c *Control) limiter(projectID string) *rate.Limiter {
	l := c.limiters[projectID]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(c.cfg.CreateRate), max(c.cfg.CreateBurst, 1))
		c.limiters[projectID] = l
	}
	return l
}

func (c *Control) tooFast(projectID string, d time.Duration) error {
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: d,
		Msg: fmt.Sprintf("project %s creates sandboxes too fast: at most %g per second (bursts of %d); retry in %s",
			projectID, c.cfg.CreateRate, max(c.cfg.CreateBurst, 1), d.Round(time.Millisecond))}
}

// fits refuses at once a request for count sandboxes that projectID's
// quotas cannot take all of, before anything is made: a fork past them
// would otherwise restore the copies that fit only to kill them, leaving
// rows of sandboxes the caller never got. It takes nothing; each sandbox
// is still admitted as it is recorded.
func (c *Control) fits(ctx context.Context, projectID string, count int, disk int64) error {
	c.admitMu.Lock()
	defer c.admitMu.Unlock()
	if c.cfg.CreateRate > 0 {
		if short := float64(count) - c.limiter(projectID).Tokens(); short > 0 {
			return c.tooFast(projectID, time.Duration(short/c.cfg.CreateRate*float64(time.Second)))
		}
	}
	if c.cfg.MaxRunning > 0 {
		live, err := c.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, LiveOnly: true})
		if err != nil {
			return fmt.Errorf("counting live sandboxes: %w", err)
		}
		if len(live)+count > c.cfg.MaxRunning {
			return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second,
				Msg: fmt.Sprintf("project %s has %d live sandboxes; %d more would pass its maximum of %d; kill some first",
					projectID, len(live), count, c.cfg.MaxRunning)}
		}
	}
	return c.diskRoom(ctx, projectID, int64(count)*disk, fmt.Sprintf("%d more sandboxes of %s each", count, mib(disk)))
}

// admit checks projectID's quotas before a sandbox of disk bytes of disk
// is recorded. The node
// records it and then calls release, so that concurrent creates are
// counted one after the other. Every path that makes a sandbox for a
// project passes here: boot, template snapshot, warm claim, snapshot
// restore and each copy of a fork.
//
// again is a create admitted before that now tries another source (the
// template snapshot after an empty warm pool, a boot after a failed
// restore): its quota is checked again, but it is not charged the create
// rate twice.
func (c *Control) admit(ctx context.Context, projectID string, disk int64, again bool) (release func(), err error) {
	c.admitMu.Lock()
	if c.cfg.CreateRate > 0 && !again {
		r := c.limiter(projectID).Reserve()
		if d := r.Delay(); d > 0 {
			r.Cancel()
			c.admitMu.Unlock()
			return nil, c.tooFast(projectID, d)
		}
	}
	if c.cfg.MaxRunning > 0 {
		live, err := c.cfg.Store.ListSandboxes(ctx, store.Filter{ProjectID: projectID, LiveOnly: true})
		if err != nil {
			c.admitMu.Unlock()
			return nil, fmt.Errorf("counting live sandboxes: %w", err)
		}
		if len(live) >= c.cfg.MaxRunning {
			c.admitMu.Unlock()
			return nil, &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: time.Second,
				Msg: fmt.Sprintf("project %s already has %d live sandboxes, its maximum; kill some first", projectID, len(live))}
		}
	}
	if err := c.diskRoom(ctx, projectID, disk, "a sandbox of "+mib(disk)); err != nil {
		c.admitMu.Unlock()
		return nil, err
	}
	return c.admitMu.Unlock, nil
}
