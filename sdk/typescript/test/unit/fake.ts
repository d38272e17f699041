// A fake Lizard API on 127.0.0.1 for unit tests: each test sets the handler
// and reads back the requests the SDK sent.

import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Seen {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export type Handler = (req: Seen, res: http.ServerResponse) => void | Promise<void>;

export class FakeServer {
  readonly requests: Seen[] = [];
  handler: Handler = (_req, res) => {
    res.writeHead(500).end('no handler');
  };
  private server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const u = new URL(req.url ?? '/', 'http://x');
      const seen: Seen = {
        method: req.method ?? '',
        path: u.pathname,
        query: u.searchParams,
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      this.requests.push(seen);
      Promise.resolve(this.handler(seen, res)).catch((err) => {
        res.destroy(err as Error);
      });
    });
  });
  url = '';

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** json answers with a JSON body. */
  static json(res: http.ServerResponse, status: number, body: unknown): void {
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }
}

export const sandboxJSON = (id: string, projectId = 'proj_123') => ({
  sandboxId: id,
  projectId,
  template: 'interpreter',
  state: 'running',
  timeoutMs: 300000,
  metadata: {},
  createdAt: '2026-01-02T03:04:05Z',
  expiresAt: '2026-01-02T03:09:05Z',
});

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
