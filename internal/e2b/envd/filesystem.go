package envd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// filesystemService is filesystem.Filesystem over the agent's /files
// calls (docs/files.md). Each call acts as the user its basic auth names
// (E2B's default "user" is the sandbox user, "root" is root): the agent
// checks what that user may do, so a call cannot write where the user
// could not.
type filesystemService struct{ h *handler }

// entry is the envd form of an agent's EntryInfo. A symlink comes
// resolved (the agent's resolveSymlinks), as envd describes it: its
// target's type and mode, and symlink_target the target's absolute path
// (the link's own path when it resolves to nothing). is_symlink is not
// set: envd has no such field (to 0.6.13), and SDKs that know it (e2b
// 2.63) would then show the link as SYMLINK rather than its target's
// type, which E2B's test_file_symlink wants. metadata is the file's
// user.e2b.* attributes, as envd 0.6.2's.
func entry(e api.EntryInfo) *filesystem.EntryInfo {
	out := &filesystem.EntryInfo{
		Name:         e.Name,
		Path:         e.Path,
		Size:         e.Size,
		Mode:         e.Mode,
		Permissions:  e.Permissions,
		Owner:        e.Owner,
		Group:        e.Group,
		ModifiedTime: timestamppb.New(e.ModTime),
		Metadata:     e.Metadata,
	}
	switch e.Type {
	case "file":
		out.Type = filesystem.FileType_FILE_TYPE_FILE
	case "dir":
		out.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		out.Type = filesystem.FileType_FILE_TYPE_SYMLINK
	}
	if e.SymlinkTarget != "" || e.Type == "symlink" {
		target := e.SymlinkTarget
		out.SymlinkTarget = &target
	}
	return out
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	return call(f.h, ctx, func(s *session) (*filesystem.StatResponse, error) {
		e, err := s.agent.Stat(s.ctx, user(req.Header()), req.Msg.GetPath())
		if err != nil {
			return nil, err
		}
		return &filesystem.StatResponse{Entry: entry(e)}, nil
	})
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	return call(f.h, ctx, func(s *session) (*filesystem.MakeDirResponse, error) {
		// envd answers already_exists for a directory that is there (the
		// SDKs' make_dir then returns false); the agent's mkdir -p would
		// not say.
		if e, err := s.agent.Stat(s.ctx, user(req.Header()), req.Msg.GetPath()); err == nil {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", e.Path))
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		e, err := s.agent.MakeDir(s.ctx, user(req.Header()), req.Msg.GetPath())
		if err != nil {
			return nil, err
		}
		return &filesystem.MakeDirResponse{Entry: entry(e)}, nil
	})
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	return call(f.h, ctx, func(s *session) (*filesystem.MoveResponse, error) {
		e, err := s.agent.Rename(s.ctx, user(req.Header()), req.Msg.GetSource(), req.Msg.GetDestination())
		if err != nil {
			return nil, err
		}
		return &filesystem.MoveResponse{Entry: entry(e)}, nil
	})
}

// maxListEntries bounds one ListDir's answer, so that a deep listing of a
// big tree cannot make the server hold it all.
const maxListEntries = 100_000

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	return call(f.h, ctx, func(s *session) (*filesystem.ListDirResponse, error) {
		depth := int(req.Msg.GetDepth())
		if depth < 1 {
			depth = 1
		}
		out := &filesystem.ListDirResponse{}
		// The agent lists one directory; deeper levels are listed in turn,
		// not following symlinks, as envd does.
		var list func(dir string, level int) error
		list = func(dir string, level int) error {
			entries, err := s.agent.List(s.ctx, user(req.Header()), dir)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if len(out.Entries) >= maxListEntries {
					return errdefs.Invalidf("depth: the listing is over %d entries; list a smaller depth", maxListEntries)
				}
				out.Entries = append(out.Entries, entry(e))
				// A link to a directory is listed, not entered.
				if e.Type == "dir" && e.SymlinkTarget == "" && level < depth {
					if err := list(e.Path, level+1); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
						return err
					}
				}
			}
			return nil
		}
		if err := list(req.Msg.GetPath(), 1); err != nil {
			return nil, err
		}
		return out, nil
	})
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	return call(f.h, ctx, func(s *session) (*filesystem.RemoveResponse, error) {
		// envd's remove is os.RemoveAll: a path that is not there is
		// removed already (E2B's files.remove of a missing path succeeds;
		// Lizard's own DELETE /files answers 404).
		if err := s.agent.Remove(s.ctx, user(req.Header()), req.Msg.GetPath()); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		return &filesystem.RemoveResponse{}, nil
	})
}

// fsEvent is the envd event of an agent's watch event (nil for none),
// with the entry the agent read beside it (include_entry, envd 0.6.3).
func fsEvent(ev api.FileEvent) *filesystem.FilesystemEvent {
	out := &filesystem.FilesystemEvent{Name: ev.Name}
	switch ev.Type {
	case api.FileCreate:
		out.Type = filesystem.EventType_EVENT_TYPE_CREATE
	case api.FileWrite:
		out.Type = filesystem.EventType_EVENT_TYPE_WRITE
	case api.FileRemove:
		out.Type = filesystem.EventType_EVENT_TYPE_REMOVE
	case api.FileRename:
		out.Type = filesystem.EventType_EVENT_TYPE_RENAME
	case api.FileChmod:
		out.Type = filesystem.EventType_EVENT_TYPE_CHMOD
	default:
		return nil
	}
	if ev.Entry != nil {
		out.Entry = entry(*ev.Entry)
	}
	return out
}

// watchEnd is the error of a watch stream that ended on its own: the
// agent ends it when the directory goes.
func watchEnd(s *session, err error) error {
	if err == io.EOF {
		if s.ctx.Err() == nil {
			return connect.NewError(connect.CodeNotFound, errors.New("the watched directory was removed"))
		}
		err = s.ctx.Err()
	}
	return s.fail(err)
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	s, err := f.h.open(following(ctx))
	if err != nil {
		return rpcError(err)
	}
	defer s.release()
	m := req.Msg
	as := user(req.Header())
	dir, err := s.agent.Stat(s.ctx, as, m.GetPath())
	if err != nil {
		return s.fail(err)
	}
	w, err := s.agent.Watch(s.ctx, as, dir.Path, m.GetRecursive(), m.GetIncludeEntry())
	if err != nil {
		return s.fail(err)
	}
	defer w.Close()
	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	type next struct {
		ev  api.FileEvent
		err error
	}
	events := make(chan next)
	go func() {
		defer close(events)
		for {
			ev, err := w.Next()
			select {
			case events <- next{ev, err}:
			case <-s.ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(keepaliveInterval(req.Header()))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-s.ctx.Done():
			return s.fail(s.ctx.Err())
		case n, ok := <-events:
			if !ok {
				return s.fail(s.ctx.Err())
			}
			if n.err != nil {
				return watchEnd(s, n.err)
			}
			// The agent reports an upload as the file's own events, as
			// envd's write makes them (internal/agent/files_watch.go).
			if ev := fsEvent(n.ev); ev != nil {
				if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
		}
	}
}
