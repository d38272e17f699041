package node

import (
	"context"
	"log/slog"

	"github.com/lizard-build/lizard/api"
)

// Audit returns the one subscriber that writes a node's events to the audit
// trail l (DATA/audit.log of `lizard serve` and of each `lizard node`):
// sandbox.create, sandbox.kill, key.create, key.revoke and sandbox.end, by
// key ID, never a key. It is the only writer of these lines, so they are
// the same whichever process runs the sandbox and whatever path ended it
// (a kill, an expiry, a failure, a restart). Lines go out in the order of
// the events.
func Audit(l *slog.Logger) func(Event) {
	return func(e Event) {
		ctx := context.Background()
		by := []any{"key_id", e.Caller.KeyID, "remote", e.Caller.Remote}
		switch {
		case e.Kind == Created:
			l.Log(ctx, slog.LevelInfo, "sandbox.create", append([]any{"sandbox_id", e.SandboxID, "project_id", e.ProjectID,
				"template", e.Template, "lizard_token", e.Token, "parent_sandbox_id", e.ParentID,
				"snapshot_id", e.SnapshotID, "forked_from", e.ForkedFrom}, by...)...)
		case e.Kind == Killed:
			l.Log(ctx, slog.LevelInfo, "sandbox.kill", append([]any{"sandbox_id", e.SandboxID, "project_id", e.ProjectID}, by...)...)
		case e.Kind == KeyCreated:
			for _, k := range e.KeyIDs {
				l.Info("key.create", "key_id", k, "project_id", e.ProjectID, "sandbox_id", e.SandboxID, "by", "lizardToken")
			}
		case e.Kind == Stopped && e.State != api.StatePaused:
			for _, k := range e.KeyIDs {
				l.Info("key.revoke", "key_id", k, "project_id", e.ProjectID, "sandbox_id", e.SandboxID, "reason", "its sandbox ended")
			}
			l.Info("sandbox.end", "sandbox_id", e.SandboxID, "project_id", e.ProjectID, "state", e.State, "reason", e.Reason)
		}
	}
}
