// Secret: the project's secrets (docs/secrets.md). A sandbox's network
// policy injects one into its requests to the hosts it was set for; no call
// returns a value. They need a project key: a sandbox's own key
// (lizardToken) gets PermissionDeniedError.

import { InvalidArgumentError } from './errors.js';
import { HttpClient, resolveConfig, type ConnectionOptions } from './http.js';
import { secretInfo, type SecretInfo, type WireSecret } from './types.js';

/** Where a secret may be sent, and the connection. */
export interface SetSecretOptions extends ConnectionOptions {
  /**
   * The names and wildcards (*.example.com) it may be sent to, as network
   * rules name them; required. Policies may inject it for these alone.
   */
  hosts: string[];
  /** Let it go to them over plain HTTP too, in the clear (default: HTTPS only). */
  allowHttp?: boolean;
}

/** Secrets of the key's project: set, list (names, hosts and times), delete. */
export class Secret {
  /**
   * set seals value as secret name, to be sent to opts.hosts alone,
   * replacing any value and hosts it had; InvalidArgumentError for a name
   * that is not an identifier, a value over 64 KiB or no hosts.
   */
  static async set(name: string, value: string, opts: SetSecretOptions): Promise<SecretInfo> {
    if (!name) throw new InvalidArgumentError('a secret needs a name');
    if (typeof value !== 'string') throw new InvalidArgumentError('a secret value must be a string');
    const hosts = opts?.hosts;
    if (!Array.isArray(hosts) || hosts.length === 0 || hosts.some((h) => typeof h !== 'string')) {
      throw new InvalidArgumentError(
        "hosts must be a non-empty array of the names or *.wildcards the secret may be sent to, such as ['api.openai.com']",
      );
    }
    const body: { value: string; hosts: string[]; allowHttp?: boolean } = { value, hosts };
    if (opts.allowHttp) body.allowHttp = true;
    const http = new HttpClient(resolveConfig(opts));
    return secretInfo(await http.request<WireSecret>('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { json: body }));
  }

  /** list returns the project's secrets by name: names and times, never values. */
  static async list(opts: ConnectionOptions = {}): Promise<SecretInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const w = await http.request<{ secrets: WireSecret[] | null }>('GET', '/v1/secrets');
    return (w.secrets ?? []).map(secretInfo);
  }

  /** delete removes secret name; NotFoundError when the project has none of that name. */
  static async delete(name: string, opts: ConnectionOptions = {}): Promise<void> {
    const http = new HttpClient(resolveConfig(opts));
    await http.request<unknown>('DELETE', `/v1/secrets/${encodeURIComponent(name)}`);
  }
}
