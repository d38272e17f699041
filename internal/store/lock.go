package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync"
	"syscall"
)

// TryLock takes the lock called name if no one holds it, for a background
// job that must run once across every process sharing the database (the
// reaper, a lease sweeper). ok is false, with no error, when another holder
// has it. release gives it back; call it once, when the job's run is done.
//
// On PostgreSQL it is a session advisory lock (pg_try_advisory_lock) held on
// a connection of its own: it is released by release, or by the server the
// moment that connection ends, so a holder that crashes or loses the
// database frees it for the others without a timeout.
//
// On SQLite it is an exclusive flock(2) on a file beside the database
// (NAME.lock-<name>), so two Stores on one file — in one process or two —
// exclude each other too; the kernel drops it when its holder exits.
//
// Meant to be taken per run, not held for life:
//
//	for range ticker.C {
//		release, ok, err := st.TryLock(ctx, "reaper")
//		if err != nil || !ok {
//			continue // another process ran it, or the database is away: next tick
//		}
//		reap(ctx)
//		release()
//	}
//
// A holder must not count on keeping the lock through a database outage
// (its connection may be gone, and with it the lock), so the job's writes
// must stay safe to repeat and conditional on the rows' state (as
// EndSandbox's are), never "I hold the lock, so I may blindly overwrite".
func (s *Store) TryLock(ctx context.Context, name string) (release func(), ok bool, err error) {
	if !lockName.MatchString(name) {
		return nil, false, fmt.Errorf("taking lock %q: a lock's name is letters, digits, '-', '_' and '.'", name)
	}
	if s.db.d == postgresDialect {
		return s.tryAdvisoryLock(ctx, name)
	}
	return s.tryFileLock(name)
}

var lockName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

func (s *Store) tryAdvisoryLock(ctx context.Context, name string) (func(), bool, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("taking lock %q: %w", name, s.db.d.wrap(err))
	}
	key := lockKey("lizard:job:" + name)
	var got bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
		conn.Close()
		return nil, false, fmt.Errorf("taking lock %q: %w", name, s.db.d.wrap(err))
	}
	if !got {
		conn.Close()
		return nil, false, nil
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			// Unlock first so that the next taker need not wait for the
			// server to notice the session's end; then drop the connection
			// rather than pool it, so no lock can outlive release on it.
			conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, key)
			conn.Raw(func(any) error { return driver.ErrBadConn })
			conn.Close()
		})
	}, true, nil
}

func (s *Store) tryFileLock(name string) (func(), bool, error) {
	if s.path == "" {
		return nil, false, fmt.Errorf("taking lock %q: the store has no file", name)
	}
	path := s.path + ".lock-" + name
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("taking lock %q: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("taking lock %q: %w", name, err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, true, nil
}

// LockProject waits for, and takes, the lock of projectID's admission for
// what records something counted against the project's disk outside a
// sandbox's create (a volume: its count and its insert are two
// statements), so that it and creates through several API processes and
// nodes at once cannot pass the project's quota together. A create takes
// the same lock in its own transaction (CreateAdmitted). On PostgreSQL it
// is a session advisory lock on a connection of its own (freed with the
// session if its holder dies); on SQLite, whose one process admits under
// the control plane's own lock, it takes nothing.
func (s *Store) LockProject(ctx context.Context, projectID string) (release func(), err error) {
	if s.db.d != postgresDialect {
		return func() {}, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("locking project %s: %w", projectID, s.db.d.wrap(err))
	}
	key := projectLockKey(projectID)
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		conn.Close()
		return nil, fmt.Errorf("locking project %s: %w", projectID, s.db.d.wrap(err))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			// Taken per create, so the connection goes back to the pool
			// once unlocked; one whose unlock failed is dropped, and the
			// lock with its session.
			if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
				conn.Raw(func(any) error { return driver.ErrBadConn })
			}
			conn.Close()
		})
	}, nil
}

// countProjectLive reads the index sandboxes_live_project alone: a create
// runs it under its project's lock (in its insert's statement,
// CreateAdmitted), so its cost must not grow with the rows of ended
// sandboxes or of other projects.
const countProjectLive = `SELECT COUNT(*) FROM sandboxes WHERE project_id = ? AND role = '' AND ended_at IS NULL`

// CountProjectLive is how many live sandboxes projectID has (its own, not
// the server's).
func (s *Store) CountProjectLive(ctx context.Context, projectID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, countProjectLive, projectID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting the live sandboxes of project %s: %w", projectID, err)
	}
	return n, nil
}
