package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a connection to a QEMU's monitor (QMP), used one command at a
// time.
type qmp struct {
	conn net.Conn
	rd   *bufio.Reader
}

func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to QMP: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	q := &qmp{conn: conn, rd: bufio.NewReader(conn)}
	if _, err := q.rd.ReadBytes('\n'); err != nil { // the greeting
		conn.Close()
		return nil, fmt.Errorf("reading QMP greeting: %w", err)
	}
	if _, err := q.do("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) Close() error { return q.conn.Close() }

// do runs one command and returns its "return" value; events arriving
// meanwhile are skipped.
func (q *qmp) do(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", cmd, err)
	}
	return q.answer(cmd)
}

// sendFile hands QEMU an open file under name (QMP getfd, the file
// descriptor passed beside the command): QEMU, confined and unprivileged,
// could not open it itself.
func (q *qmp) sendFile(name string, f *os.File) error {
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return errors.New("QMP getfd: not a unix socket")
	}
	b, _ := json.Marshal(map[string]any{"execute": "getfd", "arguments": map[string]any{"fdname": name}})
	if _, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("QMP getfd: %w", err)
	}
	_, err := q.answer("getfd")
	return err
}

// answer reads up to cmd's answer and returns its "return" value; events
// arriving meanwhile are skipped.
func (q *qmp) answer(cmd string) (json.RawMessage, error) {
	for {
		line, err := q.rd.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("QMP %s: decoding %q: %w", cmd, line, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, fmt.Errorf("QMP %s: %s: %s", cmd, resp.Error.Class, resp.Error.Desc)
		default:
			return resp.Return, nil
		}
	}
}

// status is the VM's run state (query-status), e.g. "running", "paused",
// "inmigrate", "postmigrate".
func (q *qmp) status() (string, error) {
	raw, err := q.do("query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	err = json.Unmarshal(raw, &st)
	return st.Status, err
}

// ignoreShared sets the migration capability x-ignore-shared, which
// leaves RAM mapped shared out of the stream; both ends must agree.
func (q *qmp) ignoreShared(on bool) error {
	_, err := q.do("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{
		{"capability": "x-ignore-shared", "state": on}}})
	return err
}

// migrate saves the stopped VM's state through the migration URI uri and
// waits, as ctx allows, for it to complete.
func (q *qmp) migrate(ctx context.Context, uri string) error {
	// QEMU throttles migration to 32 MiB/s by default: fine across a
	// network, a needless wait into a local file.
	if _, err := q.do("migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return err
	}
	if _, err := q.do("migrate", map[string]any{"uri": uri}); err != nil {
		return err
	}
	for {
		raw, err := q.do("query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status      string `json:"status"`
			ErrorDesc   string `json:"error-desc"`
			TotalTimeMS int64  `json:"total-time"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("decoding query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			_, _ = q.do("migrate_cancel", nil)
			return fmt.Errorf("waiting for the migration: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var errExited = errors.New("QEMU exited")
