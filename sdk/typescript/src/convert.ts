/**
 * The boundary: the API's wire types (snake_case, generated from api/openapi.yaml into wire.ts) to the SDK's
 * camelCase results, and the SDK's options to the wire's requests. Nothing else in the SDK touches a wire
 * member name, so a change of the document breaks the build here.
 */
import { InvalidArgumentError, ProtocolError } from './errors.js';
import { checkMs } from './client.js';
import type {
  Approval,
  ApprovalField,
  Duration,
  FileEntry,
  ModelAccess,
  PortUrl,
  SandboxInfo,
  SandboxLimits,
  SandboxOptions,
} from './types.js';
import type * as wire from './wire.js';

/** A number of milliseconds as a Go duration string. */
export function msDuration(ms: number): wire.Duration {
  return `${Math.round(ms)}ms`;
}

/**
 * The wire duration of a `...Ms` option, or of its deprecated alias (a number of milliseconds or a Go
 * duration string, passed on as is).
 */
export function durationOption(name: string, ms: number | undefined, legacy: Duration | undefined): wire.Duration | undefined {
  if (checkMs(name, ms) !== undefined) return msDuration(ms as number);
  if (legacy === undefined) return undefined;
  if (typeof legacy === 'string') return legacy;
  return msDuration(checkMs(name, legacy) as number);
}

const unitMs: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, μs: 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 };

/** A Go duration string ("1h2m3.5s", "0s") in milliseconds. */
export function parseGoDuration(s: string): number {
  if (s === '0') return 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let total = 0;
  let at = 0;
  const neg = s.startsWith('-');
  if (neg || s.startsWith('+')) at = re.lastIndex = 1;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * (unitMs[m[2] as string] as number);
    at = re.lastIndex;
  }
  if (at !== s.length || at === (neg ? 1 : 0)) throw new ProtocolError(`the daemon sent a duration that is not one: ${JSON.stringify(s)}`);
  return neg ? -total : total;
}

function date(s: string): Date {
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) throw new ProtocolError(`the daemon sent a time that is not one: ${JSON.stringify(s)}`);
  return d;
}

function optDate(s: string | undefined): Date | undefined {
  return s === undefined ? undefined : date(s);
}

/** Copies the members of `from` that are not undefined (optional members stay absent, not `undefined`). */
function defined<T extends object>(into: T, from: Partial<T>): T {
  for (const [k, v] of Object.entries(from)) if (v !== undefined) (into as Record<string, unknown>)[k] = v;
  return into;
}

export function sandboxInfo(w: wire.Sandbox): SandboxInfo {
  return defined<SandboxInfo>(
    {
      id: w.id,
      state: w.state,
      labels: w.labels ?? {},
      createdAt: date(w.created_at),
      idleTimeoutMs: parseGoDuration(w.idle_timeout),
      lastUsedAt: date(w.last_used_at),
    },
    { expiresAt: optDate(w.expires_at), endedAt: optDate(w.ended_at), endReason: w.end_reason },
  );
}

export function approval(w: wire.Approval): Approval {
  return defined<Approval>(
    {
      id: w.id,
      kind: w.kind,
      state: w.state,
      requestedBy: w.requested_by,
      summary: w.summary,
      fields: (w.fields ?? []).map((f) => defined<ApprovalField>({ name: f.name, value: f.value }, { format: f.format })),
      data: w.data,
      createdAt: date(w.created_at),
      expiresAt: date(w.expires_at),
    },
    {
      session: w.session,
      via: w.via,
      agentNote: w.agent_note,
      decidedAt: optDate(w.decided_at),
      decidedBy: w.decided_by,
      scope: w.scope,
      reason: w.reason,
      result: w.result,
    },
  );
}

export function fileEntry(w: wire.FileEntry): FileEntry {
  return { name: w.name, type: w.type, size: w.size, mode: w.mode, mtime: date(w.mtime) };
}

export function portUrl(w: wire.PortURL): PortUrl {
  return { port: w.port, url: w.url, expiresAt: date(w.expires_at) };
}

export function modelAccess(w: wire.ModelToken): ModelAccess {
  return {
    token: w.token,
    openaiBaseUrl: w.openai_base_url,
    anthropicBaseUrl: w.anthropic_base_url,
    session: w.session,
    expiresAt: date(w.expires_at),
  };
}

function limits(l: SandboxLimits): wire.Limits {
  return defined<wire.Limits>(
    {},
    {
      memory: l.memory,
      pids: l.pids,
      cpus: l.cpus,
      timeout: durationOption('limits.timeoutMs', l.timeoutMs, l.timeout),
      output: l.output,
      workspace: l.workspace,
      tmp: l.tmp,
      open_files: l.openFiles,
    },
  );
}

/** The create request for these options. */
export function createRequest(o: SandboxOptions): wire.CreateSandboxRequest {
  if (o.egress !== undefined && !Array.isArray(o.egress.allow)) {
    throw new InvalidArgumentError('egress.allow must be a list of hosts');
  }
  return defined<wire.CreateSandboxRequest>(
    {},
    {
      image: o.image,
      env: o.env,
      labels: o.labels,
      egress: o.egress === undefined ? undefined : { allow: o.egress.allow },
      volumes: o.volumes?.map((v) => ({ name: v.name, path: v.path })),
      ports: o.ports === undefined ? undefined : [...o.ports],
      ttl: durationOption('ttlMs', o.ttlMs, o.ttl),
      idle: durationOption('idleMs', o.idleMs, o.idle),
      idle_action: o.idleAction,
      limits: o.limits === undefined ? undefined : limits(o.limits),
      snapshot: o.snapshot,
      secrets: o.secrets === undefined ? undefined : [...o.secrets],
    },
  );
}
