/**
 * The SDK's surface: the factories, request timeouts and cancellation on every call, and one error class per
 * kind, against a real daemon (and, for a daemon that never answers, a listener that accepts and stays silent).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import type { Server, Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import {
  AbortError,
  ApprovalDeniedError,
  ConflictError,
  ForbiddenError,
  InsufficientStorageError,
  InternalError,
  InvalidArgumentError,
  IronClawSandbox,
  LimitExceededError,
  NotFoundError,
  ProtocolError,
  RateLimitError,
  REQUEST_TIMEOUT_MS,
  RETRIES,
  RETRY_MAX_MS,
  Sandbox,
  SandboxError,
  TimeoutError,
  TooLargeError,
  UnauthorizedError,
  UnavailableError,
} from '../src/index.js';
import { errorFor } from '../src/errors.js';
import { errorCodeValues } from '../src/wire.js';
import { startDaemon } from './helpers/daemon.js';
import type { Daemon } from './helpers/daemon.js';

let d: Daemon;
let sbx: Sandbox;
/** A listener that accepts connections and never answers: a daemon that hangs. */
let silent: Server;
let silentAddr: string;
const sockets: Socket[] = [];

before(async () => {
  d = await startDaemon({ args: ['--model-token-max', '1'] });
  sbx = await Sandbox.create({ addr: d.addr, token: d.agentToken, labels: { suite: 'surface' } });
  silent = createServer((s) => {
    sockets.push(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const a = silent.address();
  silentAddr = `127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`;
});
after(async () => {
  for (const s of sockets) s.destroy();
  silent?.close();
  await sbx?.destroy().catch(() => undefined);
  await d?.stop();
});

describe('factories', () => {
  test('Sandbox and IronClawSandbox are one class; create, connect and list are static on it', async () => {
    assert.equal(IronClawSandbox, Sandbox);
    assert.ok(sbx instanceof IronClawSandbox);
    assert.equal(sbx.info?.state, 'running');
    const again = await Sandbox.connect(sbx.id!, { addr: d.addr, token: d.agentToken });
    assert.ok(again instanceof Sandbox);
    assert.equal(again.id, sbx.id);
    const listed = await Sandbox.list({ addr: d.addr, token: d.agentToken, labels: { suite: 'surface' } });
    assert.deepEqual(
      listed.map((s) => s.id),
      [sbx.id],
    );
    assert.ok(listed[0]!.createdAt instanceof Date);
  });

  test('create(image, opts) asks for that image', async () => {
    // This daemon serves no images: the answer names the refusal, which proves the image was sent.
    await assert.rejects(Sandbox.create('/srv/images/app', { addr: d.addr, token: d.agentToken }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgumentError, String(err));
      assert.match(err.message, /image/);
      return true;
    });
  });
});

describe('request timeout and cancellation', () => {
  test('the default is 60 s', () => {
    assert.equal(REQUEST_TIMEOUT_MS, 60_000);
    assert.equal(RETRIES, 4);
    assert.equal(RETRY_MAX_MS, 30_000);
  });

  test('a daemon that does not answer is a TimeoutError after requestTimeoutMs', async () => {
    await assert.rejects(
      Sandbox.connect('sbx-0000000000000000', { addr: silentAddr, token: 't', requestTimeoutMs: 200 }),
      (err: unknown) => {
        assert.ok(err instanceof TimeoutError && err instanceof SandboxError, String(err));
        assert.equal(err.code, 'request_timeout');
        assert.equal(err.status, undefined);
        assert.match(err.message, /requestTimeoutMs/);
        return true;
      },
    );
  });

  test("a call's requestTimeoutMs overrides the connection's; 0 is no timeout", async () => {
    const s = new Sandbox({ addr: silentAddr, token: 't', id: 'sbx-0000000000000000', requestTimeoutMs: 0 });
    await assert.rejects(s.getInfo({ requestTimeoutMs: 150 }), TimeoutError);
    // With none at all, only the signal ends the call, and it is an AbortError, not a timeout.
    const ac = new AbortController();
    const p = s.getInfo({ signal: ac.signal });
    setTimeout(() => ac.abort(new Error('enough')), 300);
    await assert.rejects(p, (err: unknown) => err instanceof AbortError && !(err instanceof TimeoutError));
  });

  test('a stream is bounded only until it begins; a long-poll gets its wait on top', async () => {
    const r = await sbx.run('sleep 1; echo done', { requestTimeoutMs: 300 });
    assert.equal(r.stdout, 'done\n');
    const a = await sbx.requestApproval({ kind: 'tool.call', data: { tool: 'x', input: {} } }, { requestTimeoutMs: 300 });
    setTimeout(() => void d.operator('POST', `/v1/approvals/${a.id}/deny`, {}), 1000);
    const final = await sbx.waitForApproval(a.id, { requestTimeoutMs: 300 });
    assert.equal(final.state, 'denied');
  });

  test('every call takes a signal', async () => {
    const aborted = AbortSignal.abort(new Error('no'));
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['engage', () => new Sandbox({ addr: d.addr, token: d.agentToken }).engage({ signal: aborted })],
      ['create', () => Sandbox.create({ addr: d.addr, token: d.agentToken, signal: aborted })],
      ['connect', () => Sandbox.connect(sbx.id!, { addr: d.addr, token: d.agentToken, signal: aborted })],
      ['list', () => Sandbox.list({ addr: d.addr, token: d.agentToken, signal: aborted })],
      ['getInfo', () => sbx.getInfo({ signal: aborted })],
      ['run', () => sbx.run('true', { signal: aborted })],
      ['writeFile', () => sbx.writeFile('x', 'y', { signal: aborted })],
      ['readFile', () => sbx.readFile('x', { signal: aborted })],
      ['readTextFile', () => sbx.readTextFile('x', { signal: aborted })],
      ['list files', () => sbx.list('/workspace', { signal: aborted })],
      ['requestApproval', () => sbx.requestApproval({ kind: 'tool.call', data: { tool: 't' } }, { signal: aborted })],
      ['getApproval', () => sbx.getApproval('apr-0000000000000000', { signal: aborted })],
      ['waitForApproval', () => sbx.waitForApproval('apr-0000000000000000', { signal: aborted })],
      ['modelAccess', () => sbx.modelAccess({ signal: aborted })],
      ['destroy', () => sbx.destroy({ signal: aborted })],
    ];
    for (const [name, fn] of calls) {
      await assert.rejects(fn(), (err: unknown) => err instanceof AbortError && err.code === 'aborted', name);
    }
    // Nothing of that happened: the sandbox runs, and no approval was filed.
    assert.equal((await sbx.getInfo()).state, 'running');
    const r = await d.operator('GET', `/v1/approvals?session=${sbx.id}&kind=tool.call&state=pending`);
    assert.deepEqual(r.body.approvals, []);
  });
});

describe('errors', () => {
  test('each API code has its class under SandboxError, keeping .code', () => {
    const classes: Record<string, new (...a: any[]) => SandboxError> = {
      invalid_argument: InvalidArgumentError,
      unauthorized: UnauthorizedError,
      forbidden: ForbiddenError,
      not_found: NotFoundError,
      method_not_allowed: ProtocolError,
      request_timeout: TimeoutError,
      conflict: ConflictError,
      too_large: TooLargeError,
      rate_limited: RateLimitError,
      limit_exceeded: LimitExceededError,
      internal: InternalError,
      unavailable: UnavailableError,
      insufficient_storage: InsufficientStorageError,
    };
    assert.deepEqual(Object.keys(classes).sort(), [...errorCodeValues].sort());
    for (const code of errorCodeValues) {
      const e = errorFor(code, 'm', { status: 499 });
      assert.ok(e instanceof classes[code]!, code);
      assert.ok(e instanceof SandboxError && e instanceof Error);
      assert.equal(e.code, code);
      assert.equal(e.status, 499);
      assert.equal(e.name, classes[code]!.name);
    }
    const unknown = errorFor('new_code', 'm');
    assert.equal(unknown.constructor, SandboxError);
    assert.equal(unknown.code, 'new_code');
    assert.ok(new ApprovalDeniedError('m', { approval: {} as any }) instanceof SandboxError);
  });

  test('a quota is a LimitExceededError', async () => {
    await sbx.modelAccess();
    await assert.rejects(sbx.modelAccess(), (err: unknown) => {
      assert.ok(err instanceof LimitExceededError, String(err));
      assert.equal(err.status, 429);
      return true;
    });
  });

  test('the rate limit is a RateLimitError with retryAfterMs', async () => {
    const slow = await startDaemon({ args: ['--rate', '0.1', '--rate-burst', '1'] });
    try {
      // retries: 0, to see the error itself (retry.test.ts has the retries).
      const s = new Sandbox({ addr: slow.addr, token: slow.agentToken, retries: 0 });
      await assert.rejects(s.getApproval('apr-0000000000000000'), NotFoundError); // the burst
      await assert.rejects(s.getApproval('apr-0000000000000000'), (err: unknown) => {
        assert.ok(err instanceof RateLimitError, String(err));
        assert.equal(err.code, 'rate_limited');
        assert.ok(err.retryAfterMs !== undefined && err.retryAfterMs >= 1000, `retryAfterMs ${err.retryAfterMs}`);
        return true;
      });
    } finally {
      await slow.stop();
    }
  });
});
