package control

// Project is one project's resources beside its sandboxes — its volumes,
// custom templates, snapshots, default network policy, secrets, lifecycle
// events and webhooks — reached one way: Control.Project(id), then the
// resource, each a small type of its own (Volumes, Templates, Snapshots,
// Network, Secrets, Events, Webhooks), so that Control keeps to
// sandboxes and what they need, and no surface holds a project's state
// beside it.
type Project struct {
	c  *Control
	id string
}

// Project is project id's resources. It checks nothing: every call on
// them is scoped to id, as the caller's key is.
func (c *Control) Project(id string) Project { return Project{c: c, id: id} }

// Volumes are the project's persistent volumes (volumes.go).
func (p Project) Volumes() Volumes { return Volumes{c: p.c, project: p.id} }

// Templates are the project's custom templates (templates.go).
func (p Project) Templates() Templates { return Templates{c: p.c, project: p.id} }

// Snapshots are the project's snapshots (snapshots.go).
func (p Project) Snapshots() Snapshots { return Snapshots{c: p.c, project: p.id} }

// Network is the project's default network policy (network.go).
func (p Project) Network() Network { return Network{c: p.c, project: p.id} }

// Volumes are one project's persistent volumes.
type Volumes struct {
	c       *Control
	project string
}

// Templates are one project's custom templates.
type Templates struct {
	c       *Control
	project string
}

// Snapshots are one project's snapshots.
type Snapshots struct {
	c       *Control
	project string
}

// Network is one project's default network policy.
type Network struct {
	c       *Control
	project string
}

// builds are the custom templates' builds in the cache, each removed once
// nothing refers to it any more (templates.go): the server's, not a
// project's.
type builds struct{ c *Control }

// Secrets are the project's secrets (docs/secrets.md): write-only, so
// nothing here returns a value.
func (p Project) Secrets() Secrets { return Secrets{c: p.c, project: p.id} }

// Secrets are one project's secrets.
type Secrets struct {
	c       *Control
	project string
}

// Events are the project's lifecycle events (docs/events.md): pages of
// them, and a stream of them as they are recorded (events.go).
func (p Project) Events() Events { return Events{c: p.c, project: p.id} }

// Events are one project's lifecycle events.
type Events struct {
	c       *Control
	project string
}

// Webhooks are the URLs the project's events are sent to (webhooks.go).
func (p Project) Webhooks() Webhooks { return Webhooks{c: p.c, project: p.id} }

// Webhooks are one project's webhooks.
type Webhooks struct {
	c       *Control
	project string
}
