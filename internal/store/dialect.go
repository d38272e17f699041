package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect is the SQL engine behind a Store. The queries are written once,
// in the SQL both engines share, with ? placeholders; the few places where
// they differ ask the dialect.
type dialect int

const (
	sqliteDialect dialect = iota
	postgresDialect
)

func (d dialect) String() string {
	if d == postgresDialect {
		return "postgres"
	}
	return "sqlite"
}

// ddl renders a migration for the engine. The migrations are written in
// SQLite's words and run unchanged there (so that databases made before
// PostgreSQL existed see the same text); PostgreSQL gets 64-bit integers
// (times are Unix milliseconds), BYTEA for blobs and BIGSERIAL for
// SQLite's AUTOINCREMENT keys.
func (d dialect) ddl(m string) string {
	if d != postgresDialect {
		return m
	}
	m = strings.ReplaceAll(m, "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
	m = integerWord.ReplaceAllString(m, "BIGINT")
	return blobWord.ReplaceAllString(m, "BYTEA")
}

var (
	integerWord = regexp.MustCompile(`\bINTEGER\b`)
	blobWord    = regexp.MustCompile(`\bBLOB\b`)
)

// rebind turns ? placeholders into PostgreSQL's $1, $2, ... outside quoted
// strings.
func (d dialect) rebind(q string) string {
	if d != postgresDialect || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	quoted := false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// skipLocked is appended to a SELECT ... LIMIT 1 that picks a row to claim:
// on PostgreSQL concurrent claimers skip a row another transaction holds
// instead of both taking it; SQLite's write transactions are serial already.
func (d dialect) skipLocked() string {
	if d == postgresDialect {
		return " FOR UPDATE SKIP LOCKED"
	}
	return ""
}

// Advisory lock keys. Transaction-level keys serialise writers of one kind
// on PostgreSQL (SQLite's immediate transactions serialise all writers).
var (
	migrateLockKey = lockKey("lizard:migrate")
	eventsLockKey  = lockKey("lizard:events")
)

// slotsLockKey serialises the slot allocations of one node.
func slotsLockKey(node string) int64 { return lockKey("lizard:slots:" + node) }

// lockKey maps a lock's name to PostgreSQL's 64-bit advisory lock key.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// serialize makes tx the only one of its kind (key) until it ends: the
// slot allocation reads the free slots and then inserts, which READ
// COMMITTED would let two transactions do with the same slot.
//
// With several keys it takes them in their order, in one statement (one
// round trip): PostgreSQL evaluates a SELECT's list left to right.
func (t *tx) serialize(ctx context.Context, keys ...int64) error {
	if t.d != postgresDialect {
		return nil
	}
	q, args := `SELECT pg_advisory_xact_lock($1)`, []any{keys[0]}
	for i, k := range keys[1:] {
		q += fmt.Sprintf(", pg_advisory_xact_lock($%d)", i+2)
		args = append(args, k)
	}
	_, err := t.Tx.ExecContext(ctx, q, args...)
	return t.d.wrap(err)
}

// wrap marks errors that mean the database cannot be reached with
// ErrUnavailable, and those that mean its disk is full with ErrDiskFull,
// keeping the driver's error (and sql.ErrNoRows) for errors.Is and
// errors.As.
func (d dialect) wrap(err error) error {
	switch {
	case err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrDiskFull):
		return err
	case diskFull(err):
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	case unavailable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// diskFull reports whether err says the database's disk is full: SQLite's
// SQLITE_FULL, PostgreSQL's disk_full (53100), or ENOSPC / EDQUOT from the
// file system.
func diskFull(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "53100" {
		return true
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// unavailable reports whether err says the database server is gone, down,
// restarting or refusing connections, as opposed to rejecting the query.
func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			pe.Code == "57P01", // admin_shutdown
			pe.Code == "57P02", // crash_shutdown
			pe.Code == "57P03", // cannot_connect_now (starting up, shutting down)
			pe.Code == "53300": // too_many_connections
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// db is the pool with the dialect's placeholders and error marking on
// every call; the rest of the package uses it like a *sql.DB.
type db struct {
	*sql.DB
	d dialect
	// statements counts the statements sent, for tests that hold a path
	// to a number of statements that does not grow with the rows.
	statements atomic.Int64
}

func (x *db) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	x.statements.Add(1)
	res, err := x.DB.ExecContext(ctx, x.d.rebind(q), args...)
	return res, x.d.wrap(err)
}

func (x *db) QueryContext(ctx context.Context, q string, args ...any) (*rows, error) {
	x.statements.Add(1)
	r, err := x.DB.QueryContext(ctx, x.d.rebind(q), args...)
	if err != nil {
		return nil, x.d.wrap(err)
	}
	return &rows{Rows: r, d: x.d}, nil
}

func (x *db) QueryRowContext(ctx context.Context, q string, args ...any) *row {
	x.statements.Add(1)
	return &row{r: x.DB.QueryRowContext(ctx, x.d.rebind(q), args...), d: x.d}
}

func (x *db) BeginTx(ctx context.Context, opts *sql.TxOptions) (*tx, error) {
	t, err := x.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, x.d.wrap(err)
	}
	return &tx{Tx: t, d: x.d, statements: &x.statements}, nil
}

// tx is a transaction with the dialect applied, as db.
type tx struct {
	*sql.Tx
	d          dialect
	statements *atomic.Int64
}

func (t *tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	t.statements.Add(1)
	res, err := t.Tx.ExecContext(ctx, t.d.rebind(q), args...)
	return res, t.d.wrap(err)
}

func (t *tx) QueryContext(ctx context.Context, q string, args ...any) (*rows, error) {
	t.statements.Add(1)
	r, err := t.Tx.QueryContext(ctx, t.d.rebind(q), args...)
	if err != nil {
		return nil, t.d.wrap(err)
	}
	return &rows{Rows: r, d: t.d}, nil
}

func (t *tx) QueryRowContext(ctx context.Context, q string, args ...any) *row {
	t.statements.Add(1)
	return &row{r: t.Tx.QueryRowContext(ctx, t.d.rebind(q), args...), d: t.d}
}

func (t *tx) Commit() error { return t.d.wrap(t.Tx.Commit()) }

type row struct {
	r *sql.Row
	d dialect
}

func (r *row) Scan(dest ...any) error { return r.d.wrap(r.r.Scan(dest...)) }

type rows struct {
	*sql.Rows
	d dialect
}

func (r *rows) Scan(dest ...any) error { return r.d.wrap(r.Rows.Scan(dest...)) }
func (r *rows) Err() error             { return r.d.wrap(r.Rows.Err()) }
