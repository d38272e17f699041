// Desktop: a desktop sandbox's screen, mouse, keyboard, windows and live
// stream (docs/desktop.md), the same operations as the Python SDK's
// sandbox.desktop. Each call is one request to /v1/sandboxes/{id}/desktop/.

import { InvalidArgumentError } from './errors.js';
import type { HttpClient } from './http.js';

/** The screen's size in pixels. */
export interface DesktopScreen {
  width: number;
  height: number;
}

/** A place on the screen, in pixels from the top left. */
export interface DesktopCursor {
  x: number;
  y: number;
}

export type MouseButton = 'left' | 'middle' | 'right';
export type ScrollDirection = 'up' | 'down' | 'left' | 'right';

/**
 * One mouse action (Desktop.mouse). `move` needs x and y; `click`, `down`,
 * `up` and `scroll` move there first when given; `drag` presses at (x, y),
 * moves to (toX, toY) and releases.
 */
export interface MouseAction {
  action: 'move' | 'click' | 'down' | 'up' | 'drag' | 'scroll';
  x?: number;
  y?: number;
  toX?: number;
  toY?: number;
  /** Default left. */
  button?: MouseButton;
  /** Clicks (1 to 10; 2 is a double click) or scroll steps (1 to 100); default 1. */
  count?: number;
  /** scroll's; default down. */
  direction?: ScrollDirection;
}

/** One keyboard action (Desktop.keyboard): type text, or press key combinations in turn. */
export interface KeyboardAction {
  action: 'type' | 'press';
  /** type's text: at most 10,000 bytes of UTF-8. */
  text?: string;
  /** press's combinations, X key names joined by '+': 'ctrl+l', 'Return', 'alt+F4'. */
  keys?: string[];
  /** Milliseconds between keys (default 12); typing may take at most 60 s. */
  delayMs?: number;
}

/** A visible window that has a title. */
export interface DesktopWindow {
  /** Its X window id, in decimal. */
  id: string;
  title: string;
  /** Its WM_CLASS instance name ('chromium'). */
  class: string;
  x: number;
  y: number;
  width: number;
  height: number;
  /** It has the focus. */
  active: boolean;
}

/** A viewer of the desktop's stream, with a token of its own. */
export interface DesktopViewer {
  /** For sandbox.desktop.stream.revoke(viewerId). */
  viewerId: string;
  /** Opens this sandbox's stream and nothing else, until it expires or is revoked (lzv_...). */
  token: string;
  /** Whether the viewer may move the mouse and type; else view-only. */
  control: boolean;
  expiresAt: Date;
  /** The stream: RFB (VNC) over a WebSocket, as noVNC speaks it, the token in its query. */
  websocketUrl: string;
  /** The console's live view of the stream, the token in its fragment. */
  url: string;
}

/** What DesktopStream.start asks for. */
export interface StreamOptions {
  /** The viewer may move the mouse and type (default false: view-only). */
  control?: boolean;
  /** How long the token opens the stream, 1 to 86 400 s (default 3 600). */
  ttlSeconds?: number;
}

interface WireViewer {
  viewerId: string;
  token: string;
  control: boolean;
  expiresAt: string;
  websocketUrl: string;
  url: string;
}

/** A region of the screen: x, y, width, height in pixels. */
export interface Region {
  x: number;
  y: number;
  width: number;
  height: number;
}

// Typing is bounded by the server at 60 s; the request gets a margin.
const KEYBOARD_TIMEOUT_MS = 90_000;

/**
 * sandbox.desktop: the screen, mouse, keyboard and windows of a sandbox made
 * from a desktop template (templates/desktop/recipe.yaml). Any other sandbox
 * answers ConflictError saying it has none. Coordinates are pixels from the
 * screen's top left, 0 to 16 383.
 */
export class Desktop {
  /** The live stream: sandbox.desktop.stream.start(), .revoke(id), .stop(). */
  readonly stream: DesktopStream;
  private readonly prefix: string;

  /** @internal */
  constructor(
    private readonly http: HttpClient,
    sandboxPrefix: string,
  ) {
    this.prefix = `${sandboxPrefix}/desktop`;
    this.stream = new DesktopStream(http, this.prefix);
  }

  /** screenshot returns the screen, or the region of it, as PNG bytes. */
  async screenshot(region?: Region): Promise<Uint8Array> {
    const query = region && {
      x: String(region.x),
      y: String(region.y),
      width: String(region.width),
      height: String(region.height),
    };
    if (region) {
      for (const [k, v] of Object.entries(region)) {
        if (!Number.isInteger(v)) throw new InvalidArgumentError(`region.${k} must be an integer of pixels, not ${String(v)}`);
      }
    }
    return this.http.bytes('GET', `${this.prefix}/screenshot`, { query });
  }

  /** screen returns the screen's size. */
  async screen(): Promise<DesktopScreen> {
    return this.http.request<DesktopScreen>('GET', `${this.prefix}/screen`);
  }

  /** cursor returns where the pointer is. */
  async cursor(): Promise<DesktopCursor> {
    return this.http.request<DesktopCursor>('GET', `${this.prefix}/cursor`);
  }

  /** mouse runs one mouse action and returns where the pointer is after it; the methods below are its usual forms. */
  async mouse(req: MouseAction): Promise<DesktopCursor> {
    return this.http.request<DesktopCursor>('POST', `${this.prefix}/mouse`, { json: req });
  }

  /** move moves the pointer to (x, y). */
  async move(x: number, y: number): Promise<DesktopCursor> {
    return this.mouse({ action: 'move', x, y });
  }

  /** click clicks (count times, default once) at (x, y) when given, else where the pointer is. */
  async click(x?: number, y?: number, opts: { button?: MouseButton; count?: number } = {}): Promise<DesktopCursor> {
    return this.mouse({ action: 'click', x, y, button: opts.button, count: opts.count });
  }

  /** doubleClick is a left double click. */
  async doubleClick(x?: number, y?: number): Promise<DesktopCursor> {
    return this.mouse({ action: 'click', x, y, count: 2 });
  }

  /** rightClick is a right click. */
  async rightClick(x?: number, y?: number): Promise<DesktopCursor> {
    return this.mouse({ action: 'click', x, y, button: 'right' });
  }

  /** mouseDown presses a button and holds it. */
  async mouseDown(button: MouseButton = 'left'): Promise<DesktopCursor> {
    return this.mouse({ action: 'down', button });
  }

  /** mouseUp releases a button. */
  async mouseUp(button: MouseButton = 'left'): Promise<DesktopCursor> {
    return this.mouse({ action: 'up', button });
  }

  /** drag presses the button at from, moves to to, and releases it. */
  async drag(from: DesktopCursor, to: DesktopCursor, button: MouseButton = 'left'): Promise<DesktopCursor> {
    return this.mouse({ action: 'drag', x: from.x, y: from.y, toX: to.x, toY: to.y, button });
  }

  /** scroll scrolls amount steps (default 1, down), at (x, y) when given. */
  async scroll(direction: ScrollDirection = 'down', amount = 1, at?: DesktopCursor): Promise<DesktopCursor> {
    return this.mouse({ action: 'scroll', direction, count: amount, x: at?.x, y: at?.y });
  }

  /** keyboard runs one keyboard action; type() and press() are its usual forms. */
  async keyboard(req: KeyboardAction): Promise<void> {
    await this.http.request<void>('POST', `${this.prefix}/keyboard`, { json: req, timeoutMs: KEYBOARD_TIMEOUT_MS });
  }

  /** type types text (at most 10,000 bytes) as if on the keyboard, delayMs between keys (default 12). */
  async type(text: string, opts: { delayMs?: number } = {}): Promise<void> {
    await this.keyboard({ action: 'type', text, delayMs: opts.delayMs });
  }

  /** press presses each key combination in turn: press('ctrl+l'), press('enter'), press('alt+F4'). */
  async press(...keys: string[]): Promise<void> {
    await this.keyboard({ action: 'press', keys });
  }

  /** open opens a file's path or a URL as the desktop would (xdg-open: HTML in the browser). */
  async open(target: string): Promise<void> {
    await this.http.request<void>('POST', `${this.prefix}/open`, { json: { target } });
  }

  /** launch starts an application by its desktop entry's name: launch('xfce4-terminal'). */
  async launch(app: string): Promise<void> {
    await this.http.request<void>('POST', `${this.prefix}/launch`, { json: { app } });
  }

  /** windows returns the visible windows that have a title. */
  async windows(): Promise<DesktopWindow[]> {
    const w = await this.http.request<{ windows: DesktopWindow[] | null }>('GET', `${this.prefix}/windows`);
    return w.windows ?? [];
  }
}

/** sandbox.desktop.stream: the desktop's live stream (VNC over a WebSocket, for noVNC). */
export class DesktopStream {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly prefix: string,
  ) {}

  /**
   * start starts the stream if it does not run and mints a new viewer with a
   * token of its own: view-only unless control. At most 8 viewers per
   * sandbox (ConflictError for the ninth: revoke one or stop the stream).
   */
  async start(opts: StreamOptions = {}): Promise<DesktopViewer> {
    const w = await this.http.request<WireViewer>('POST', `${this.prefix}/stream`, {
      json: { control: opts.control || undefined, ttlSeconds: opts.ttlSeconds },
    });
    return { ...w, expiresAt: new Date(w.expiresAt) };
  }

  /** revoke revokes one viewer: its token stops working and its connections close. */
  async revoke(viewerId: string): Promise<void> {
    await this.http.request<void>('DELETE', `${this.prefix}/stream/viewers/${encodeURIComponent(viewerId)}`);
  }

  /** stop stops the stream and revokes every viewer. */
  async stop(): Promise<void> {
    await this.http.request<void>('DELETE', `${this.prefix}/stream`);
  }
}
