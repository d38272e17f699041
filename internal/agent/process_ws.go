package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/coder/websocket"

	"github.com/lizard-build/lizard/api"
)

// maxSocketMessage bounds one message a client sends on a process's
// WebSocket (keystrokes, a pasted block, a control).
const maxSocketMessage = 1 << 20

// processSocket is GET /processes/{pid}/ws: a process's output and input
// over one WebSocket, the natural wire for a terminal in a browser. The
// agent sends the kept output, then live output, as binary frames of raw
// bytes (stdout and stderr alike; a pty's bytes as they are), "dropped"
// text frames when this reader fell behind, and last an "end" text frame
// with the exit code before closing normally. The client sends binary
// frames as input and text frames as api.ProcessControl: "resize" and
// "eof" (close stdin). Origins are not checked: only the server reaches
// the agent (guard.go), and the API authenticates with a bearer key,
// which a browser never attaches on its own.
func (pa *processAPI) processSocket(w http.ResponseWriter, r *http.Request) {
	p := pa.processOf(w, r)
	if p == nil {
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(maxSocketMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		defer cancel()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := socketInput(p, typ, msg); err != nil {
				// Input problems are told, not fatal: output may go on.
				_ = writeControl(ctx, c, api.ProcessControl{Type: "error", Error: err.Error()})
			}
		}
	}()
	var ended *api.ProcessInfo
	follow(ctx, p, func(ch outChunk) error {
		return c.Write(ctx, websocket.MessageBinary, ch.data)
	}, func(n int64) error {
		return writeControl(ctx, c, api.ProcessControl{Type: api.OutputDropped, Dropped: n})
	}, func(info api.ProcessInfo) {
		ended = &info
	})
	if ended == nil {
		return // the client left, or the connection broke
	}
	if writeControl(ctx, c, api.ProcessControl{Type: api.EventEnd, ExitCode: ended.ExitCode, Error: ended.Error}) != nil {
		return
	}
	c.Close(websocket.StatusNormalClosure, fmt.Sprintf("process exited with code %d", *ended.ExitCode))
}

func writeControl(ctx context.Context, c *websocket.Conn, m api.ProcessControl) error {
	b, _ := json.Marshal(m)
	return c.Write(ctx, websocket.MessageText, b)
}

// socketInput acts on one message from the client.
func socketInput(p *bgProcess, typ websocket.MessageType, msg []byte) error {
	if typ == websocket.MessageBinary {
		return p.writeStdin(msg)
	}
	var m api.ProcessControl
	if err := json.Unmarshal(msg, &m); err != nil {
		return fmt.Errorf("a text frame is a JSON control message: %w", err)
	}
	switch m.Type {
	case "resize":
		size := api.PtySize{Cols: m.Cols, Rows: m.Rows}
		if size.Cols < 1 || size.Cols > maxPtySide || size.Rows < 1 || size.Rows > maxPtySide {
			return fmt.Errorf("resize: cols and rows must be 1 to %d, not %dx%d", maxPtySide, m.Cols, m.Rows)
		}
		return p.resize(size)
	case "eof":
		return p.closeStdin()
	}
	return errors.New(`unknown control message type: want "resize" or "eof"`)
}
