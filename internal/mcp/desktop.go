package mcp

import (
	"context"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lizard-build/lizard/api"
)

// The desktop tools (docs/desktop.md): what a computer-use model needs of a
// desktop sandbox — look, click, type — through the same API calls as the
// SDKs' sandbox.desktop.

func addDesktopTools(srv *sdk.Server, s *session) {
	sdk.AddTool(srv, &sdk.Tool{Name: "screenshot", Description: "Take a screenshot of a desktop sandbox's screen " +
		"(a sandbox of the desktop template): a PNG image. Coordinates for click are pixels of this image."}, s.screenshot)
	sdk.AddTool(srv, &sdk.Tool{Name: "click", Description: "Click the mouse at (x, y) on a desktop sandbox's screen, " +
		"in pixels from the top left of the screenshot; left button by default, count 2 for a double click."}, s.click)
	sdk.AddTool(srv, &sdk.Tool{Name: "type_text", Description: "Type text on a desktop sandbox's keyboard, into " +
		"whatever has the focus (click a field first)."}, s.typeText)
	sdk.AddTool(srv, &sdk.Tool{Name: "press_keys", Description: "Press keys on a desktop sandbox's keyboard, each a " +
		"combination such as enter, ctrl+l, alt+F4 or shift+Tab, in turn."}, s.pressKeys)
}

type screenshotArgs struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) screenshot(ctx context.Context, _ *sdk.CallToolRequest, in screenshotArgs) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	png, err := s.api.Desktop().Screenshot(ctx, id, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("taking a screenshot: %w", err)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{Data: png, MIMEType: "image/png"}}}, nil, nil
}

type clickArgs struct {
	X         int    `json:"x" jsonschema:"pixels from the screen's left edge"`
	Y         int    `json:"y" jsonschema:"pixels from the screen's top edge"`
	Button    string `json:"button,omitempty" jsonschema:"left (default), middle or right"`
	Count     int    `json:"count,omitempty" jsonschema:"clicks: 1 (default), 2 for a double click"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) click(ctx context.Context, _ *sdk.CallToolRequest, in clickArgs) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	at, err := s.api.Desktop().Mouse(ctx, id, api.DesktopMouseRequest{Action: api.MouseClick, X: &in.X, Y: &in.Y, Button: in.Button, Count: in.Count})
	if err != nil {
		return nil, nil, fmt.Errorf("clicking at (%d, %d): %w", in.X, in.Y, err)
	}
	return text("clicked at (%d, %d)", at.X, at.Y), nil, nil
}

type typeArgs struct {
	Text      string `json:"text" jsonschema:"the text to type, at most 10,000 bytes"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) typeText(ctx context.Context, _ *sdk.CallToolRequest, in typeArgs) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.api.Desktop().Keyboard(ctx, id, api.DesktopKeyboardRequest{Action: api.KeyboardType, Text: in.Text}); err != nil {
		return nil, nil, fmt.Errorf("typing: %w", err)
	}
	return text("typed %d characters", len([]rune(in.Text))), nil, nil
}

type pressArgs struct {
	Keys      []string `json:"keys" jsonschema:"key combinations pressed in turn, such as [\"ctrl+l\", \"enter\"]"`
	SandboxID string   `json:"sandbox_id,omitempty" jsonschema:"default the session's sandbox"`
}

func (s *session) pressKeys(ctx context.Context, _ *sdk.CallToolRequest, in pressArgs) (*sdk.CallToolResult, any, error) {
	id, err := s.sandbox(in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if err := s.api.Desktop().Keyboard(ctx, id, api.DesktopKeyboardRequest{Action: api.KeyboardPress, Keys: in.Keys}); err != nil {
		return nil, nil, fmt.Errorf("pressing %v: %w", in.Keys, err)
	}
	return text("pressed %v", in.Keys), nil, nil
}
