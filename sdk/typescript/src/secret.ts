// Secret: the project's secrets (docs/secrets.md). A sandbox's network
// policy injects one into its requests; no call returns a value.

import { InvalidArgumentError } from './errors.js';
import { HttpClient, resolveConfig, type ConnectionOptions } from './http.js';
import { secretInfo, type SecretInfo, type WireSecret } from './types.js';

/** Secrets of the key's project: set, list (names and times), delete. */
export class Secret {
  /**
   * set seals value as secret name, replacing any value it had;
   * InvalidArgumentError for a name that is not an identifier or a value
   * over 64 KiB.
   */
  static async set(name: string, value: string, opts: ConnectionOptions = {}): Promise<SecretInfo> {
    if (!name) throw new InvalidArgumentError('a secret needs a name');
    if (typeof value !== 'string') throw new InvalidArgumentError('a secret value must be a string');
    const http = new HttpClient(resolveConfig(opts));
    return secretInfo(await http.request<WireSecret>('PUT', `/v1/secrets/${encodeURIComponent(name)}`, { json: { value } }));
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
