// A minimal WebSocket client over node:http's upgrade (text frames only),
// enough to test the port proxy: Node 20 has no WebSocket client of its own
// without a flag, and a dependency for a test is not worth it.

import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { Duplex } from 'node:stream';

export class WebSocketClient {
  private buf = Buffer.alloc(0);
  private ended = false;
  private waiters: (() => void)[] = [];

  private constructor(
    readonly status: number,
    private readonly socket?: Duplex,
  ) {
    socket?.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    const end = (): void => {
      this.ended = true;
      this.wake();
    };
    socket?.on('end', end);
    socket?.on('close', end);
    socket?.on('error', end);
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** open performs the handshake; status is 101 on success, else the HTTP status (and no socket). */
  static open(url: string, headers: Record<string, string>): Promise<WebSocketClient> {
    return new Promise((resolve, reject) => {
      const req = http.request(url, {
        headers: {
          ...headers,
          Connection: 'Upgrade',
          Upgrade: 'websocket',
          'Sec-WebSocket-Version': '13',
          'Sec-WebSocket-Key': randomBytes(16).toString('base64'),
        },
      });
      req.on('upgrade', (res, socket, head) => {
        const ws = new WebSocketClient(res.statusCode ?? 0, socket);
        if (head.length) ws.buf = Buffer.concat([ws.buf, head]);
        resolve(ws);
      });
      req.on('response', (res) => {
        res.resume();
        resolve(new WebSocketClient(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end();
    });
  }

  send(text: string): void {
    const data = Buffer.from(text);
    const mask = randomBytes(4);
    const frame = Buffer.concat([Buffer.from([0x81, 0x80 | data.length]), mask, data.map((b, i) => b ^ mask[i % 4]!)]);
    this.socket!.write(frame);
  }

  private async need(n: number): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (this.buf.length < n) {
      if (this.ended) throw new Error('closed');
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 500);
      });
    }
  }

  async recv(): Promise<string> {
    await this.need(2);
    let n = this.buf[1]! & 0x7f;
    let off = 2;
    if (n === 126) {
      await this.need(4);
      n = this.buf.readUInt16BE(2);
      off = 4;
    }
    await this.need(off + n);
    const op = this.buf[0]! & 0x0f;
    const payload = this.buf.subarray(off, off + n).toString();
    this.buf = this.buf.subarray(off + n);
    if (op === 0x8) throw new Error('closed (close frame)');
    return payload;
  }

  close(): void {
    this.socket?.destroy();
  }
}

/** waitOk polls url until it answers 200 (30 s at most) and returns its body. */
export async function waitOk(url: string, headers: Record<string, string>): Promise<string> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const resp = await fetch(url, { headers });
    const body = await resp.text();
    if (resp.status === 200) return body;
    if (Date.now() > deadline) throw new Error(`GET ${url}: ${resp.status} ${body} after 30 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
