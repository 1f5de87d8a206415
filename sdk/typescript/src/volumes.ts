import { Http } from './client.js';
import type { CallOptions, ConnectionOptions, VolumeInfo } from './types.js';
import type * as wire from './wire.js';

function volumeInfo(w: wire.Volume): VolumeInfo {
  const v: VolumeInfo = { name: w.name, principal: w.principal, sizeBytes: w.size_bytes, createdAt: new Date(w.created_at) };
  if (w.sandbox) v.sandbox = w.sandbox;
  return v;
}

function call(o: CallOptions): CallOptions {
  const out: CallOptions = {};
  if (o.signal) out.signal = o.signal;
  if (o.requestTimeoutMs !== undefined) out.requestTimeoutMs = o.requestTimeoutMs;
  return out;
}

/**
 * Named persistent volumes on a daemon that runs as root: storage with a quota (its size) that outlives
 * sandboxes. Mount one with `Sandbox.create({ volumes: [{ name, path }] })`; it is in one running sandbox at a
 * time. An agent token sees only its own volumes.
 *
 * ```ts
 * await Volumes.create('notes', { size: '1G' });
 * const sbx = await Sandbox.create({ volumes: [{ name: 'notes', path: '/workspace/notes' }] });
 * ```
 */
export class Volumes {
  /** Creates a volume of `size` (bytes, or a string such as `"512M"`; at least 16 MiB). */
  static async create(name: string, opts: ConnectionOptions & CallOptions & { size: number | string }): Promise<VolumeInfo> {
    const w = await new Http(opts).json<wire.Volume>('POST', '/v1/volumes', { ...call(opts), body: { name, size: opts.size } });
    return volumeInfo(w);
  }

  /** Your volumes (an operator's token: everyone's). */
  static async list(opts: ConnectionOptions & CallOptions = {}): Promise<VolumeInfo[]> {
    const w = await new Http(opts).json<wire.VolumeList>('GET', '/v1/volumes', call(opts));
    return (w.volumes ?? []).map(volumeInfo);
  }

  /** One volume (`NotFoundError` if it is not yours or does not exist). */
  static async get(name: string, opts: ConnectionOptions & CallOptions = {}): Promise<VolumeInfo> {
    return volumeInfo(await new Http(opts).json<wire.Volume>('GET', `/v1/volumes/${encodeURIComponent(name)}`, call(opts)));
  }

  /** Deletes a volume and its files (`ConflictError` while a running sandbox has it mounted). */
  static async delete(name: string, opts: ConnectionOptions & CallOptions = {}): Promise<VolumeInfo> {
    return volumeInfo(await new Http(opts).json<wire.Volume>('DELETE', `/v1/volumes/${encodeURIComponent(name)}`, call(opts)));
  }
}
