// Package store keeps Lizard's durable state — projects, API keys and
// sandboxes — in an embedded SQLite database (modernc.org/sqlite, no cgo)
// or in PostgreSQL (pgx, no cgo), behind the one Store (docs/store.md).
//
// SQLite runs in WAL mode with a busy timeout and immediate write
// transactions, so the server and `lizard admin` can use one file at the same
// time. PostgreSQL is for several processes on several machines: the
// queries that would race under READ COMMITTED take row or advisory locks.
// Sandbox environment variables are never stored: they may hold secrets.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/errdefs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

var (
	// ErrNotFound means no row has that ID.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the row already exists, or is in a state that does
	// not allow the change (such as ending a sandbox that has already ended).
	ErrConflict = errors.New("conflict")
	// ErrFull means every address slot is taken by a live sandbox.
	ErrFull = errors.New("no free address slot")
	// ErrUnavailable means the database could not be reached (PostgreSQL
	// down, restarting or unreachable). The call may be retried: the Store
	// reconnects by itself once the database is back. It is of kind
	// errdefs.ErrUnavailable, with a message for the API's caller, so that
	// what answers the caller need not know the store.
	ErrUnavailable error = &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: "the database is unreachable; try again shortly"}
	// ErrDiskFull means the database could not write for lack of disk
	// space (SQLite's SQLITE_FULL, PostgreSQL's disk_full). The call may
	// be retried once space is freed. It is of kind errdefs.ErrDiskFull,
	// whose answer says what to free.
	ErrDiskFull = fmt.Errorf("database: %w", errdefs.ErrDiskFull)
)

// FileName is the database file inside a data directory.
const FileName = "lizard.db"

// Store is a handle on one database: a SQLite file or a PostgreSQL
// database. It is safe for concurrent use.
type Store struct {
	db *db
	// path is the SQLite file (TryLock's lock files sit beside it).
	path string
	// node, when scoped, is the cluster node this handle works for
	// (OnNode): its new sandboxes record it, and the queries a node runs
	// over "all" sandboxes (reaper, reconcile, warm pool, paused images)
	// see only its own.
	node   string
	scoped bool
}

// OnNode returns a handle on the same database for cluster node name:
// sandboxes it creates are recorded as that node's, address slots are
// that node's own, and lists of sandboxes, paused sandboxes and snapshot
// images are the node's. The handle is not closed on its own: close s.
func (s *Store) OnNode(name string) *Store {
	c := *s
	c.node, c.scoped = name, true
	return &c
}

// Node is the cluster node this handle works for ("" unscoped).
func (s *Store) Node() string { return s.node }

// Open opens (creating if needed) the database in dataDir and brings its
// schema up to date.
func Open(ctx context.Context, dataDir string) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	return OpenFile(ctx, filepath.Join(dataDir, FileName))
}

// OpenFile opens (creating if needed) the database at path and brings its
// schema up to date.
func OpenFile(ctx context.Context, path string) (*Store, error) {
	s, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrating %s: %w", path, err)
	}
	return s, nil
}

// openSQLite opens the SQLite database at path as it is.
func openSQLite(path string) (*Store, error) {
	q := url.Values{}
	// busy_timeout first: the others may need to wait for another process.
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// Immediate transactions take the write lock at BEGIN, so two writers
	// wait for each other (busy_timeout) instead of one failing with
	// SQLITE_BUSY when it upgrades a read lock.
	q.Set("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return &Store{db: &db{DB: sdb, d: sqliteDialect}, path: abs}, nil
}

// OpenURL opens the database rawURL names and brings its schema up to date:
// postgres://user:password@host:port/db?sslmode=... (or postgresql://, or
// any connection string pgx accepts) for PostgreSQL; sqlite:PATH,
// sqlite:///abs/path or a plain file path for SQLite. Several processes
// may open one PostgreSQL database at once: the migration runs once, under
// an advisory lock.
func OpenURL(ctx context.Context, rawURL string) (*Store, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		return openPostgres(ctx, rawURL)
	case strings.HasPrefix(rawURL, "sqlite://"):
		return OpenFile(ctx, strings.TrimPrefix(rawURL, "sqlite://"))
	case strings.HasPrefix(rawURL, "sqlite:"):
		return OpenFile(ctx, strings.TrimPrefix(rawURL, "sqlite:"))
	case rawURL == "":
		return nil, errors.New("opening the database: empty URL")
	case strings.Contains(rawURL, "://"):
		return nil, fmt.Errorf("opening the database: unsupported URL scheme in %q: use postgres:// or sqlite:", redact(rawURL))
	}
	return OpenFile(ctx, rawURL)
}

func openPostgres(ctx context.Context, rawURL string) (*Store, error) {
	s, name, err := connectPostgres(rawURL)
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("migrating %s: %w", name, err)
	}
	return s, nil
}

// connectPostgres opens the PostgreSQL database rawURL names as it is;
// name is how messages call it.
func connectPostgres(rawURL string) (_ *Store, name string, _ error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("parsing the PostgreSQL URL %s: %w", redact(rawURL), err)
	}
	name = fmt.Sprintf("postgres %s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	sdb := stdlib.OpenDB(*cfg)
	// Bounded, so that many API processes stay well under the server's
	// max_connections (100 by default); idle ones are let go, and every
	// reused connection is checked first (stdlib pings one idle > 1s), so
	// a restarted server costs no failed call once it is back.
	sdb.SetMaxOpenConns(16)
	sdb.SetMaxIdleConns(4)
	sdb.SetConnMaxIdleTime(5 * time.Minute)
	return &Store{db: &db{DB: sdb, d: postgresDialect}}, name, nil
}

// redact hides the password of a URL in messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Dialect names the engine: "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.db.d.String() }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// migrations are applied in order; migration i brings the schema to
// version i+1. Append only: never edit one that has shipped. They are
// written once for both engines, in SQLite's words (dialect.ddl gives
// PostgreSQL BIGINT and BYTEA): keep to the SQL both share.
var migrations = []string{
	`
CREATE TABLE projects (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL
);
CREATE TABLE sandboxes (
	id         TEXT PRIMARY KEY,
	project_id TEXT NOT NULL REFERENCES projects(id),
	template   TEXT NOT NULL,
	state      TEXT NOT NULL,
	timeout_ms INTEGER NOT NULL,
	metadata   TEXT NOT NULL DEFAULT '{}',
	created_at INTEGER NOT NULL,
	expires_at INTEGER,
	ended_at   INTEGER,
	end_reason TEXT NOT NULL DEFAULT '',
	slot       INTEGER NOT NULL,
	host_addr  TEXT NOT NULL,
	guest_addr TEXT NOT NULL
);
-- An address slot belongs to at most one live sandbox.
CREATE UNIQUE INDEX sandboxes_live_slot ON sandboxes(slot) WHERE ended_at IS NULL;
CREATE INDEX sandboxes_project ON sandboxes(project_id, created_at);
CREATE INDEX sandboxes_live_expiry ON sandboxes(expires_at) WHERE ended_at IS NULL;
CREATE TABLE api_keys (
	id         TEXT PRIMARY KEY,
	project_id TEXT NOT NULL REFERENCES projects(id),
	hash       BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER,
	sandbox_id TEXT REFERENCES sandboxes(id)
);
CREATE INDEX api_keys_sandbox ON api_keys(sandbox_id) WHERE sandbox_id IS NOT NULL;
`,
	// Pause, resume and snapshots (snapshots.go). A paused sandbox is live
	// but holds no address: its slot is the negative -rowid, unique and
	// outside every pool.
	`
CREATE TABLE sandbox_pause (
	sandbox_id   TEXT PRIMARY KEY REFERENCES sandboxes(id),
	on_timeout   TEXT NOT NULL DEFAULT 'kill',
	image_dir    TEXT NOT NULL DEFAULT '',
	remaining_ms INTEGER,
	paused_at    INTEGER
);
CREATE TABLE snapshots (
	id         TEXT PRIMARY KEY,
	project_id TEXT NOT NULL REFERENCES projects(id),
	sandbox_id TEXT NOT NULL,
	template   TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	size_bytes INTEGER NOT NULL,
	image_dir  TEXT NOT NULL
);
CREATE INDEX snapshots_project ON snapshots(project_id, created_at);
`,
	// A sandbox's shape (Shape, shape.go) so that every restore of it, or
	// of a snapshot of it, gets the limits and egress it was created with;
	// and its role: '' for users' sandboxes, or one of the server's own
	// (RoleTemplate, RoleWarm), which users never see.
	`
ALTER TABLE sandboxes ADD COLUMN shape TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN role TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN shape TEXT NOT NULL DEFAULT '';
`,
	// The sandbox whose key (lizardToken) created a sandbox, if any: such
	// children are bounded in life, and the audit trail shows the chain.
	`
ALTER TABLE sandboxes ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
`,
	// A paused sandbox's negative slot comes from a counter instead of
	// -rowid, which PostgreSQL has not: -value is unique among live rows
	// because the counter only grows. It starts past the slots that
	// sandboxes paused before this migration hold.
	`
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
);
INSERT INTO counters (name, value)
	SELECT 'paused_slot', COALESCE(MAX(-slot), 0) FROM sandboxes WHERE slot < 0;
`,
	// Many machines (docs/cluster.md): every sandbox records the node it
	// runs on ('' for `lizard serve`), address slots are per node, and
	// nodes register with a lease they renew (nodes.go).
	`
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
DROP INDEX sandboxes_live_slot;
CREATE UNIQUE INDEX sandboxes_live_node_slot ON sandboxes(node, slot) WHERE ended_at IS NULL;
CREATE INDEX sandboxes_live_node ON sandboxes(node) WHERE ended_at IS NULL;
CREATE TABLE nodes (
	name         TEXT PRIMARY KEY,
	addr         TEXT NOT NULL,
	slots        INTEGER NOT NULL,
	memory_bytes INTEGER NOT NULL,
	free_memory  INTEGER NOT NULL,
	sandboxes    INTEGER NOT NULL,
	started_at   INTEGER NOT NULL,
	lease_until  INTEGER NOT NULL,
	lost_at      INTEGER
);
`,
	// Persistent volumes (volumes.go): named per project, each one
	// filesystem image of size_bytes on the node.
	`
CREATE TABLE volumes (
	id         TEXT PRIMARY KEY,
	project_id TEXT NOT NULL REFERENCES projects(id),
	name       TEXT NOT NULL,
	size_bytes INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX volumes_project_name ON volumes(project_id, name);
`,
	// Custom templates (templates.go): a project's named recipe and the
	// key (hash) of its build in the template cache.
	`
CREATE TABLE templates (
	project_id TEXT NOT NULL REFERENCES projects(id),
	name       TEXT NOT NULL,
	tkey       TEXT NOT NULL,
	base       TEXT NOT NULL,
	recipe     TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	build_ms   INTEGER NOT NULL,
	size_bytes INTEGER NOT NULL,
	PRIMARY KEY (project_id, name)
);
CREATE INDEX templates_key ON templates(tkey);
`,
	// In a cluster a volume lives on one node's disk ('' for `lizard
	// serve`), where the sandboxes that mount it are placed.
	`
ALTER TABLE volumes ADD COLUMN node TEXT NOT NULL DEFAULT '';
`,
	// A key may stop working at a time of its own: the lizardToken of a
	// sandbox made with another sandbox's key dies at that sandbox's
	// bound (--max-child-timeout), whatever becomes of the sandbox.
	`
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
`,
	// Secrets (secrets.go): a project's named values, sealed by package
	// secrets with the operator's key (key_id names it) before they get
	// here; the database never holds one in the clear.
	`
CREATE TABLE secrets (
	project_id TEXT NOT NULL REFERENCES projects(id),
	name       TEXT NOT NULL,
	key_id     TEXT NOT NULL,
	sealed     BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (project_id, name)
);
`,
	// Lifecycle events (events.go): appended in ID order, read by ID
	// (a follower resumes after the last it saw), pruned by time.
	`
CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	project_id TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	type       TEXT NOT NULL,
	at         INTEGER NOT NULL,
	metadata   TEXT NOT NULL DEFAULT '{}',
	data       TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_project ON events(project_id, id);
CREATE INDEX events_sandbox ON events(sandbox_id, id);
CREATE INDEX events_at ON events(at);
`,
	// Webhooks (webhooks.go): a project's URLs, the events each is yet to
	// be sent (one delivery per webhook and event, claimed with a lease)
	// and every attempt's outcome.
	`
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	project_id TEXT NOT NULL REFERENCES projects(id),
	url        TEXT NOT NULL,
	types      TEXT NOT NULL DEFAULT '',
	secret     TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	cursor     INTEGER NOT NULL
);
CREATE INDEX webhooks_project ON webhooks(project_id, created_at);
CREATE TABLE webhook_deliveries (
	id            INTEGER PRIMARY KEY AUTOINCREMENT,
	webhook_id    TEXT NOT NULL,
	event_id      INTEGER NOT NULL,
	sandbox_id    TEXT NOT NULL,
	state         TEXT NOT NULL,
	attempts      INTEGER NOT NULL DEFAULT 0,
	next_at       INTEGER NOT NULL,
	claimed_until INTEGER NOT NULL DEFAULT 0,
	created_at    INTEGER NOT NULL,
	UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_at);
CREATE INDEX webhook_deliveries_order ON webhook_deliveries(webhook_id, sandbox_id, event_id);
CREATE TABLE webhook_attempts (
	delivery_id INTEGER NOT NULL,
	attempt     INTEGER NOT NULL,
	at          INTEGER NOT NULL,
	status      INTEGER NOT NULL,
	error       TEXT NOT NULL DEFAULT '',
	took_ms     INTEGER NOT NULL,
	PRIMARY KEY (delivery_id, attempt)
);
`,
	// A paused sandbox's image, and a snapshot's, is durable once it is
	// in the image store (docs/storage.md): it then outlives its node.
	`
ALTER TABLE sandbox_pause ADD COLUMN durable INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snapshots ADD COLUMN durable INTEGER NOT NULL DEFAULT 0;
`,
	// A project's default network policy by name (docs/network.md), JSON
	// as a sandbox shape's; '' is none: the server's --network-default.
	`
ALTER TABLE projects ADD COLUMN network TEXT NOT NULL DEFAULT '';
`,
	// A node being drained (docs/cluster.md) takes no new sandboxes, and
	// the image store it records is where its images can be moved from.
	`
ALTER TABLE nodes ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN image_store TEXT NOT NULL DEFAULT '';
`,
	// The images a node holds on its disk, as its heartbeat reports them
	// for placement (nodes.go): a JSON array of image store names,
	// bounded; '' none.
	`
ALTER TABLE nodes ADD COLUMN images TEXT NOT NULL DEFAULT '';
`,
	// The hosts a secret may be sent to (secrets.go): a JSON array of
	// names and wildcards; '' for a secret set before, which is sent
	// nowhere until it is set again with its hosts. allow_http: it may
	// also go over plain HTTP.
	`
ALTER TABLE secrets ADD COLUMN hosts TEXT NOT NULL DEFAULT '';
ALTER TABLE secrets ADD COLUMN allow_http INTEGER NOT NULL DEFAULT 0;
`,
	// A snapshot's name (snapshots.go), '' none: one snapshot of a
	// project holds a name at a time.
	`
ALTER TABLE snapshots ADD COLUMN name TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX snapshots_name ON snapshots(project_id, name) WHERE name <> '';
`,
	// disk_only: the sandbox's pauses keep its disk alone, no memory
	// (Pause.DiskOnly).
	`
ALTER TABLE sandbox_pause ADD COLUMN disk_only INTEGER NOT NULL DEFAULT 0;
`,
	// digest: the image a template built on one (recipe from) was built
	// from, pinned; '' for a built-in base's.
	`
ALTER TABLE templates ADD COLUMN digest TEXT NOT NULL DEFAULT '';
`,
	// version: the Lizard version a node reports with its heartbeat
	// (nodes.go), which placement checks against the API's; '' for a
	// node of a release that reported none.
	`
ALTER TABLE nodes ADD COLUMN version TEXT NOT NULL DEFAULT '';
`,
	// A project's live sandboxes, which every create counts under the
	// project's lock (CountProjectLive): without it the count read every
	// live row of the cluster, or every row the project ever had, so a
	// create's cost grew with the fleet's history (bench/fleet: 2,093
	// blocks and 28.7 ms a count at 100k rows; 12.7 blocks, 0.22 ms with it).
	`
CREATE INDEX sandboxes_live_project ON sandboxes(project_id, role) WHERE ended_at IS NULL;
`,
	// event_ids: on PostgreSQL an event's ID is its transaction's ID plus
	// base (Events.Append); base keeps new IDs above every earlier one
	// (raised at open when they are not: eventIDBase). Unused on SQLite.
	`
CREATE TABLE event_ids (base INTEGER NOT NULL);
INSERT INTO event_ids (base) VALUES (0);
`,
}

// SchemaVersion is the schema version this code writes.
var SchemaVersion = len(migrations)

func (s *Store) migrate(ctx context.Context) error { return s.migrateTo(ctx, len(migrations)) }

// migrateTo brings the schema to version n (tests make every earlier
// schema with it).
func (s *Store) migrateTo(ctx context.Context, n int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Several processes starting at once against one PostgreSQL: the first
	// migrates, the others wait here and then find the schema current.
	// (SQLite's immediate transaction is the lock there.)
	if err := tx.serialize(ctx, migrateLockKey); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var v int
	err = tx.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (0)`); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this lizard (%d): upgrade lizard", v, len(migrations))
	}
	for i := v; i < n; i++ {
		// Tx.ExecContext: DDL has no placeholders to rebind, and without
		// arguments pgx runs the whole script in one simple query.
		if _, err := tx.Tx.ExecContext(ctx, s.db.d.ddl(migrations[i])); err != nil {
			return fmt.Errorf("applying migration %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?`, max(v, n)); err != nil {
		return err
	}
	if err := tx.eventIDBase(ctx, n); err != nil {
		return err
	}
	return tx.Commit()
}

// eventIDBase raises event_ids.base on PostgreSQL, where an event's ID is
// its transaction's ID plus base, until new IDs are above every event
// recorded: on an upgrade from IDs of a sequence, and after a restore into
// another server, whose transaction IDs start again low. Run under the
// migration lock, at every open: a restore is found by the first process
// to start on it.
func (t *tx) eventIDBase(ctx context.Context, version int) error {
	if t.d != postgresDialect || version < eventIDsVersion {
		return nil
	}
	_, err := t.ExecContext(ctx, `UPDATE event_ids SET base = m.last - txid_current() + 1
		FROM (SELECT COALESCE(MAX(id), 0) AS last FROM events) m WHERE m.last >= txid_current() + base`)
	if err != nil {
		return fmt.Errorf("keeping event IDs above the last: %w", err)
	}
	return nil
}

// eventIDsVersion is the schema version that has event_ids.
var eventIDsVersion = func() int {
	for i, m := range migrations {
		if strings.Contains(m, "CREATE TABLE event_ids") {
			return i + 1
		}
	}
	panic("store: no migration makes event_ids")
}()

// Version reports the schema version of the open database.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	return v, err
}

// isConstraint reports whether err is a constraint violation (primary
// key, unique index, foreign key) of either engine.
func isConstraint(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "23") // integrity_constraint_violation
	}
	return false
}

func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505" // unique_violation
	}
	return false
}

// Times are stored as Unix milliseconds (UTC), which sort and compare in SQL.
func toMillis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func nullMillis(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func timePtr(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromMillis(n.Int64)
	return &t
}

// placeholders returns "?, ?, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
