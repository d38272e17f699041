// The part of noVNC's RFB client (@novnc/novnc, core/rfb.js; docs/API.md)
// the console's live desktop uses. noVNC ships no types of its own.
declare module "@novnc/novnc" {
  export default class RFB extends EventTarget {
    constructor(target: HTMLElement, urlOrChannel: string | WebSocket, options?: { shared?: boolean; credentials?: { password?: string } });
    /** Send no mouse or keyboard events (the server enforces it too for a view-only viewer). */
    viewOnly: boolean;
    /** Scale the remote screen to fit the target element (CSS only: the canvas keeps the screen's pixels). */
    scaleViewport: boolean;
    focusOnClick: boolean;
    background: string;
    disconnect(): void;
    focus(): void;
  }
}
