// Network: a sandbox's network policy by domain name (docs/network.md).

import { NotFoundError } from './errors.js';
import { HttpClient, resolveConfig, type ConnectionOptions } from './http.js';

/** A sandbox's egress by domain name; deny rules win over allow rules. */
export interface NetworkPolicy {
  /** What names and addresses no rule names get: 'allow' (the default) or 'deny'. */
  default?: 'allow' | 'deny';
  /** Names ('api.example.com'), wildcards ('*.example.com'), IPv4 addresses and prefixes, optionally ':port'. */
  allow?: string[];
  deny?: string[];
  /** TCP ports checked by name through the node's proxy (default 80 and 443). */
  ports?: number[];
  /** Headers set on requests to a domain at the egress; values may hold {{ secrets.NAME }}. */
  inject?: { domain: string; headers: Record<string, string> }[];
}

/** What network.update changes: each field given replaces the policy's. */
export interface NetworkUpdate extends NetworkPolicy {
  /** End the sandbox's open connections too (default false: only new ones follow the update). */
  cut?: boolean;
}

/** One egress decision of a sandbox (network.log()). */
export interface NetworkLogEntry {
  time: Date;
  /** dns, http or tls. */
  kind: string;
  /** The name asked for (lower-case punycode). */
  name: string;
  /** The address connected to (or answered). */
  addr: string;
  /** The port the sandbox connected to (0 for DNS). */
  port: number;
  allowed: boolean;
  /** Why it was denied. */
  reason: string;
  /** What the connection carried each way, once it ended. */
  bytesOut: number;
  bytesIn: number;
}

interface WireLogEntry {
  time: string;
  kind: string;
  name?: string;
  addr?: string;
  port?: number;
  allowed: boolean;
  reason?: string;
  bytesOut?: number;
  bytesIn?: number;
}

/** sandbox.network: change the sandbox's policy while it runs, read its log. */
export class Network {
  /** @internal */
  constructor(
    private readonly http: HttpClient,
    private readonly prefix: string,
  ) {}

  /**
   * update changes the policy; new connections follow it at once, open ones
   * go on unless cut. It returns the policy now in force. A bad rule is an
   * InvalidArgumentError naming the field; a sandbox created without a
   * policy, a ConflictError.
   */
  async update(u: NetworkUpdate): Promise<NetworkPolicy> {
    return this.http.request<NetworkPolicy>('PATCH', `${this.prefix}/network`, { json: { ...u, cut: u.cut || undefined } });
  }

  /** log returns the sandbox's newest egress decisions (at most 1000), oldest first. */
  async log(): Promise<NetworkLogEntry[]> {
    const w = await this.http.request<{ entries: WireLogEntry[] | null }>('GET', `${this.prefix}/network/log`);
    return (w.entries ?? []).map((e) => ({
      time: new Date(e.time),
      kind: e.kind,
      name: e.name ?? '',
      addr: e.addr ?? '',
      port: e.port ?? 0,
      allowed: e.allowed,
      reason: e.reason ?? '',
      bytesOut: e.bytesOut ?? 0,
      bytesIn: e.bytesIn ?? 0,
    }));
  }

  /**
   * getDefault returns the key's project's default policy, which sandboxes
   * created without `network` get; undefined when the project has none (they
   * get the server's --network-default).
   */
  static async getDefault(opts: ConnectionOptions = {}): Promise<NetworkPolicy | undefined> {
    const http = new HttpClient(resolveConfig(opts));
    try {
      return await http.request<NetworkPolicy>('GET', '/v1/network/default');
    } catch (err) {
      if (err instanceof NotFoundError) return undefined;
      throw err;
    }
  }

  /**
   * setDefault sets the project's default policy for sandboxes created from
   * now on; InvalidArgumentError naming the field for a bad rule or one looser
   * than the server permits.
   */
  static async setDefault(policy: NetworkPolicy, opts: ConnectionOptions = {}): Promise<NetworkPolicy> {
    const http = new HttpClient(resolveConfig(opts));
    return http.request<NetworkPolicy>('PUT', '/v1/network/default', { json: policy });
  }

  /** clearDefault clears the project's default policy: new sandboxes get the server's again. */
  static async clearDefault(opts: ConnectionOptions = {}): Promise<void> {
    const http = new HttpClient(resolveConfig(opts));
    await http.request<unknown>('DELETE', '/v1/network/default');
  }
}
