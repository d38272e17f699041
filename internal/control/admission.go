package control

// The control plane's part of admission is an early refusal: the create
// rate, charged once per sandbox asked for, and the quotas checked before
// anything is made. The quotas themselves are enforced by the node as it
// records each sandbox (node.Admission), where no path can pass them.

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/lizard-build/lizard/internal/errdefs"
)

// fits refuses at once a request for count sandboxes of disk bytes of disk
// each that projectID's create rate or quotas cannot take all of, before
// anything is made: a fork past them would otherwise restore the copies
// that fit only to kill them, leaving rows of sandboxes the caller never
// got. It charges the create rate for count sandboxes, all or none; the
// quotas are checked again as each sandbox is recorded.
func (c *Control) fits(ctx context.Context, projectID string, count int, disk int64) error {
	if err := c.cfg.Quota.Fits(ctx, projectID, count, disk); err != nil {
		return err
	}
	if c.cfg.CreateRate <= 0 {
		return nil
	}
	c.rateMu.Lock()
	defer c.rateMu.Unlock()
	l := c.limiters[projectID]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(c.cfg.CreateRate), max(c.cfg.CreateBurst, 1))
		c.limiters[projectID] = l
	}
	now := time.Now()
	r := l.ReserveN(now, count)
	d := r.DelayFrom(now)
	if r.OK() && d == 0 {
		return nil
	}
	r.CancelAt(now)
	if !r.OK() {
		d = time.Duration(float64(count-l.Burst()) / c.cfg.CreateRate * float64(time.Second))
	}
	return &errdefs.Error{Kind: errdefs.ErrRateLimited, RetryAfter: d,
		Msg: fmt.Sprintf("project %s creates sandboxes too fast: at most %g per second (bursts of %d); retry in %s",
			projectID, c.cfg.CreateRate, max(c.cfg.CreateBurst, 1), d.Round(time.Millisecond))}
}
