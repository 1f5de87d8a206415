import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { AbortError, IronClawSandbox, RateLimitError, TimeoutError, UnavailableError } from '../src/index.js';
import { Http, retryDelayMs } from '../src/client.js';
import { startDaemon } from './helpers/daemon.js';
import type { Daemon } from './helpers/daemon.js';

/** A fetch that records each request's method, path and answer status. */
function recording(): { fetch: typeof globalThis.fetch; seen: { method: string; path: string; status: number }[] } {
  const seen: { method: string; path: string; status: number }[] = [];
  const f: typeof globalThis.fetch = async (input, init) => {
    const res = await globalThis.fetch(input, init);
    seen.push({ method: init?.method ?? 'GET', path: new URL(String(input)).pathname, status: res.status });
    return res;
  };
  return { fetch: f, seen };
}

describe('retries through the daemon', () => {
  // A tiny per-sandbox limit: 2 requests a second, a burst of 4.
  let d: Daemon;
  before(async () => {
    d = await startDaemon({ args: ['--sandbox-rate', '2', '--sandbox-rate-burst', '4'] });
  });
  after(async () => {
    await d?.stop();
  });

  test('idempotent calls succeed through 429s', async () => {
    const rec = recording();
    const s = new IronClawSandbox({ addr: d.addr, token: d.agentToken, fetch: rec.fetch });
    try {
      await s.engage();
      await s.writeFile('a.txt', 'hello');
      // 8 reads at once against 2 a second: most meet a 429 at first; all succeed.
      const got = await Promise.all(Array.from({ length: 8 }, () => s.readTextFile('/workspace/a.txt')));
      assert.deepEqual(got, Array(8).fill('hello'));
      const limited = rec.seen.filter((r) => r.status === 429);
      assert.ok(limited.length > 0, 'no request met the limit');
      assert.ok(limited.every((r) => r.method === 'GET' || r.method === 'PUT'), JSON.stringify(limited));
    } finally {
      await s.destroy().catch(() => undefined);
    }
  });

  test('a command (a POST) is not retried', async () => {
    const rec = recording();
    const s = new IronClawSandbox({ addr: d.addr, token: d.agentToken, fetch: rec.fetch });
    try {
      await s.engage();
      // Empty the sandbox's bucket with reads that are not retried.
      const noRetry = await IronClawSandbox.connect(s.id!, { addr: d.addr, token: d.agentToken, retries: 0 });
      await Promise.allSettled(Array.from({ length: 10 }, () => noRetry.getInfo()));
      const before = rec.seen.length;
      await assert.rejects(s.run('true'), (err: unknown) => {
        assert.ok(err instanceof RateLimitError, String(err));
        assert.ok(err.retryAfterMs !== undefined && err.retryAfterMs >= 1000);
        return true;
      });
      const execs = rec.seen.slice(before).filter((r) => r.path.endsWith('/exec'));
      assert.equal(execs.length, 1, JSON.stringify(execs));
    } finally {
      await s.destroy().catch(() => undefined);
    }
  });
});

/** A server answering every request with `status` (and Retry-After `retryAfter`, if set), counting them. */
async function answerer(status: number, retryAfter?: string): Promise<{ addr: string; count: () => number; close: () => Promise<void> }> {
  let n = 0;
  const srv = createServer((req, res) => {
    n++;
    req.resume();
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (retryAfter !== undefined) headers['retry-after'] = retryAfter;
    res.writeHead(status, headers);
    res.end(JSON.stringify({ error: { code: status === 429 ? 'rate_limited' : 'unavailable', message: 'busy' } }));
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  return {
    addr: `127.0.0.1:${port}`,
    count: () => n,
    close: () => new Promise((r) => srv.close(() => r())),
  };
}

/** Runs `use` against an {@link answerer} server, closing it afterwards. */
async function answering(status: number, retryAfter: string | undefined, use: (srv: { addr: string; count: () => number }) => Promise<void>): Promise<void> {
  const srv = await answerer(status, retryAfter);
  try {
    await use(srv);
  } finally {
    await srv.close();
  }
}

describe('retry bounds', () => {
  test('at most retries + 1 attempts, then the last error', async () => {
    await answering(503, undefined, async (srv) => {
      const s = connectTo(srv.addr, { retries: 2 });
      await assert.rejects(s.readFile('/workspace/x'), UnavailableError);
      assert.equal(srv.count(), 3);
    });
  });

  test('retries: 0 sends once; a POST is sent once', async () => {
    await answering(502, undefined, async (srv) => {
      const s = connectTo(srv.addr, { retries: 0 });
      await assert.rejects(s.readFile('/workspace/x'));
      assert.equal(srv.count(), 1);
      const t = connectTo(srv.addr, {});
      await assert.rejects(t.run('true'));
      assert.equal(srv.count(), 2);
    });
  });

  test('Retry-After beyond retryMaxMs is not waited for', async () => {
    await answering(429, '60', async (srv) => {
      const s = connectTo(srv.addr, { retryMaxMs: 2_000 });
      const start = Date.now();
      await assert.rejects(s.readFile('/workspace/x'), RateLimitError);
      assert.equal(srv.count(), 1);
      assert.ok(Date.now() - start < 1_000);
    });
  });

  test('Retry-After is honoured, and never past requestTimeoutMs', async () => {
    await answering(429, '1', async (srv) => {
      const s = connectTo(srv.addr, { retries: 1 });
      let start = Date.now();
      await assert.rejects(s.readFile('/workspace/x'), RateLimitError);
      assert.equal(srv.count(), 2);
      assert.ok(Date.now() - start >= 1_000, `retried after ${Date.now() - start} ms`);
      // A 1.5 s timeout leaves room for one retry (at 1 s) but not a second (at 2 s or more).
      const t = connectTo(srv.addr, { requestTimeoutMs: 1_500 });
      start = Date.now();
      await assert.rejects(t.readFile('/workspace/x'), RateLimitError);
      assert.equal(srv.count(), 4);
      assert.ok(Date.now() - start < 1_500);
    });
  });

  test('an abort during the wait ends the call at once', async () => {
    await answering(503, '5', async (srv) => {
      const s = connectTo(srv.addr, {});
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 200);
      const start = Date.now();
      await assert.rejects(s.readFile('/workspace/x', { signal: ctl.signal }), AbortError);
      assert.ok(Date.now() - start < 2_000);
      assert.equal(srv.count(), 1);
    });
  });

  test('network errors are retried, within the timeout', async () => {
    const s = connectTo('127.0.0.1:1', { requestTimeoutMs: 10_000 });
    const start = Date.now();
    await assert.rejects(s.readFile('/workspace/x'), (err: unknown) => err instanceof UnavailableError && !(err instanceof TimeoutError));
    // 4 retries: 100, 200, 400, 800 ms of backoff, each half to all of it.
    assert.ok(Date.now() - start >= 700, `gave up after ${Date.now() - start} ms`);
  });

  test('the backoff doubles with jitter, and Retry-After is a floor', () => {
    assert.equal(retryDelayMs(1, undefined, () => 1), 100);
    assert.equal(retryDelayMs(1, undefined, () => 0), 50);
    assert.equal(retryDelayMs(3, undefined, () => 1), 400);
    assert.equal(retryDelayMs(20, undefined, () => 1), 5_000);
    assert.equal(retryDelayMs(1, 1_000, () => 0), 1_000);
    assert.ok(retryDelayMs(1, 1_000, () => 1) <= 1_100);
  });
});

/** The SDK's transport to addr. */
function connectTo(addr: string, opts: { retries?: number; retryMaxMs?: number; requestTimeoutMs?: number }): Client {
  const http = new Http({ addr, token: 'x', ...opts });
  return {
    readFile: (path, o = {}) => http.bytes('GET', '/v1/sandboxes/sbx-0000000000000000/files', { ...o, query: { path } }),
    run: (cmd) => http.json('POST', '/v1/sandboxes/sbx-0000000000000000/exec', { body: { cmd }, query: { wait: '1' } }),
  };
}

interface Client {
  readFile(path: string, opts?: { signal?: AbortSignal }): Promise<Uint8Array>;
  run(cmd: string): Promise<unknown>;
}
