// Volume: the project's persistent volumes (docs/volumes.md). Mount one at
// create with CodeSandbox.create({ volumes: [{ name, path }] }).

import { InvalidArgumentError } from './errors.js';
import { HttpClient, resolveConfig, type ConnectionOptions } from './http.js';
import { volumeInfo, type VolumeInfo, type WireVolume } from './types.js';

export interface CreateVolumeOptions extends ConnectionOptions {
  /** Its size in MiB, enforced by its filesystem (default the server's, 1024). */
  sizeMb?: number;
}

/** Persistent volumes of the key's project. */
export class Volume {
  /** create makes a volume; ConflictError if the project has one of that name. */
  static async create(name: string, opts: CreateVolumeOptions = {}): Promise<VolumeInfo> {
    if (!name) throw new InvalidArgumentError('a volume needs a name');
    if (opts.sizeMb !== undefined && (!Number.isInteger(opts.sizeMb) || opts.sizeMb <= 0)) {
      throw new InvalidArgumentError(`sizeMb must be a positive integer of MiB, not ${opts.sizeMb}`);
    }
    const http = new HttpClient(resolveConfig(opts));
    return volumeInfo(await http.request<WireVolume>('POST', '/v1/volumes', { json: { name, sizeMb: opts.sizeMb } }));
  }

  /** list returns the project's volumes by name. */
  static async list(opts: ConnectionOptions = {}): Promise<VolumeInfo[]> {
    const http = new HttpClient(resolveConfig(opts));
    const w = await http.request<{ volumes: WireVolume[] | null }>('GET', '/v1/volumes');
    return (w.volumes ?? []).map(volumeInfo);
  }

  /** get returns one volume; NotFoundError when the project has none of that name. */
  static async get(name: string, opts: ConnectionOptions = {}): Promise<VolumeInfo> {
    const http = new HttpClient(resolveConfig(opts));
    return volumeInfo(await http.request<WireVolume>('GET', `/v1/volumes/${encodeURIComponent(name)}`));
  }

  /** delete removes a volume and its data; ConflictError while a live sandbox mounts it. */
  static async delete(name: string, opts: ConnectionOptions = {}): Promise<void> {
    const http = new HttpClient(resolveConfig(opts));
    await http.request<unknown>('DELETE', `/v1/volumes/${encodeURIComponent(name)}`);
  }
}
