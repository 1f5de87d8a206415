/**
 * The Mastra Workspace contract, against a real daemon: paths against basePath, Mastra's error classes,
 * LocalSandbox's result semantics (abort, timeout, maxRetainedBytes), recovery when the daemon ended the
 * sandbox, atomic get-or-create, getInfo, instructions, writeFiles modes, walk and grep in few requests
 * (counted), and Mastra's built-in grep and list tools through a real Agent.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent } from '@mastra/core/agent';
import type { MastraModelConfig } from '@mastra/core/llm';
import { RequestContext } from '@mastra/core/request-context';
import {
  DirectoryNotFoundError,
  FileNotFoundError,
  LocalFilesystem,
  NotDirectoryError,
  PermissionError,
  SandboxAbortError,
  SandboxError as MastraSandboxError,
  UnsupportedGrepPatternError,
  Workspace,
  WorkspaceReadOnlyError,
} from '@mastra/core/workspace';
import { IronClawSandbox } from '../src/index.js';
import { IronClawFilesystem, IronClawWorkspaceSandbox, MASTRA_ID_LABEL, jsRegexToERE } from '../src/mastra.js';
import { daemonPerFile } from './helpers/daemon.js';

process.env['MASTRA_TELEMETRY_DISABLED'] = '1';

const srv = daemonPerFile();

/** A fetch that counts the requests made through it (method and path). */
function counting() {
  const calls: string[] = [];
  const fetch: typeof globalThis.fetch = (input, init) => {
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    calls.push(`${init?.method ?? 'GET'} ${url.pathname}`);
    return globalThis.fetch(input, init);
  };
  return { calls, fetch };
}

async function proxyModel(): Promise<MastraModelConfig> {
  const helper = new IronClawSandbox(srv.conn);
  const access = await helper.modelAccess();
  const openai = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token });
  return openai.chat('gpt-4o-mini') as unknown as MastraModelConfig;
}
const mockCall = (name: string, args: unknown) => JSON.stringify({ mock_tool_calls: [{ name, arguments: args }] });

async function workspace(extra: { fetch?: typeof globalThis.fetch } = {}) {
  const sandbox = new IronClawWorkspaceSandbox({ ...srv.conn, ...extra });
  const fs = new IronClawFilesystem({ sandbox });
  const ws = new Workspace({ sandbox, filesystem: fs });
  srv.cleanup.push(() => ws.destroy());
  await ws.init();
  return { sandbox, fs, ws };
}

describe('IronClawFilesystem paths and errors', () => {
  test('paths resolve against basePath; realpath, symlinks, mimeType, errors as LocalFilesystem', async () => {
    const { sandbox, fs } = await workspace();
    await fs.writeFile('/notes/a.txt', 'hello', { mimeType: 'text/plain' });
    assert.equal(await sandbox.client.readTextFile('/workspace/notes/a.txt'), 'hello');
    assert.equal(await fs.readFile('notes/a.txt', { encoding: 'utf-8' }), 'hello');
    assert.equal(await fs.readFile('/workspace/notes/a.txt', { encoding: 'utf-8' }), 'hello');
    assert.equal(await fs.exists('/notes/a.txt'), true);
    assert.deepEqual(
      (await fs.readdir('/')).map((e) => e.name),
      ['notes'],
      'readdir("/") lists what exists("/x") finds',
    );
    assert.deepEqual((await fs.readdir('/notes')).map((e) => e.name), ['a.txt']);

    const st = await fs.stat('/notes/a.txt');
    assert.equal(st.path, 'notes/a.txt');
    assert.equal(st.mimeType, 'text/plain');
    assert.equal((await fs.stat('notes')).mimeType, undefined);
    assert.equal((await fs.stat('/')).path, '');
    await fs.writeFile('img/x.png', new Uint8Array([0x89, 0x50]));
    assert.equal((await fs.stat('img/x.png')).mimeType, 'image/png');

    // escaping the workspace is a PermissionError, reads and writes alike
    await assert.rejects(fs.readFile('../etc/passwd'), PermissionError);
    await assert.rejects(fs.writeFile('/../etc/x', 'y'), PermissionError);
    await assert.rejects(fs.readdir('/workspace/../tmp'), PermissionError);
    // a file is not a directory
    await assert.rejects(fs.readdir('notes/a.txt'), NotDirectoryError);
    await assert.rejects(fs.readdir('nowhere'), DirectoryNotFoundError);

    // symlinks: entries carry the target; realpath resolves them (relative to basePath, as LocalFilesystem)
    await sandbox.executeCommand('ln -s notes/a.txt link && ln -s notes dirlink && ln -s /etc/hostname out');
    const entries = await fs.readdir('/');
    const link = entries.find((e) => e.name === 'link');
    assert.deepEqual(link, { name: 'link', type: 'file', isSymlink: true, symlinkTarget: 'notes/a.txt' });
    assert.equal(entries.find((e) => e.name === 'dirlink')?.type, 'directory');
    assert.equal(await fs.realpath('link'), 'notes/a.txt');
    assert.equal(await fs.realpath('/dirlink/a.txt'), 'notes/a.txt');
    assert.equal(await fs.realpath('/'), '');
    await assert.rejects(fs.realpath('out'), PermissionError);
    await assert.rejects(fs.realpath('missing'), FileNotFoundError);

    assert.equal(fs.resolveAbsolutePath('notes/a.txt'), undefined);
    assert.match(fs.getInstructions(), /relative to it/);
    const custom = new IronClawFilesystem({ sandbox, instructions: ({ defaultInstructions }) => `${defaultInstructions} Be brief.` });
    assert.match(custom.getInstructions(), /relative to it.*Be brief\.$/);
    assert.equal(new IronClawFilesystem({ sandbox, instructions: '' }).getInstructions(), '');
    const fi = fs.getInfo();
    assert.equal(fi.icon, 'hard-drive');
    assert.deepEqual(fi.metadata, { basePath: '/workspace', sandboxId: sandbox.sandboxId });

    const ro = new IronClawFilesystem({ sandbox, readOnly: true });
    for (const p of [
      ro.writeFile('x', 'y'),
      ro.appendFile('x', 'y'),
      ro.deleteFile('notes/a.txt'),
      ro.mkdir('d'),
      ro.rmdir('notes'),
      ro.copyFile('notes/a.txt', 'b'),
      ro.moveFile('notes/a.txt', 'b'),
    ]) {
      await assert.rejects(p, WorkspaceReadOnlyError);
    }
    assert.equal(await ro.readFile('/notes/a.txt', { encoding: 'utf-8' }), 'hello');
  });

  test('walk: one request, relative paths, hidden entries, maxDepth, odd names', async () => {
    const c = counting();
    const { sandbox, fs } = await workspace({ fetch: c.fetch });
    await sandbox.executeCommand(
      "nl=$(printf '\\nx'); nl=${nl%x}; mkdir -p src/lib .hidden/x && " +
        "touch src/a.ts src/lib/b.ts .hidden/x/c.ts .env 'src/with space.txt' \"src/new${nl}line.txt\" && ln -s a.ts src/alias.ts",
    );
    c.calls.length = 0;
    const all = await fs.walk('/');
    assert.deepEqual(c.calls.length, 1, c.calls.join('\n'));
    const paths = all.map((e) => e.path).sort();
    assert.deepEqual(paths, [
      'src',
      'src/a.ts',
      'src/alias.ts',
      'src/lib',
      'src/lib/b.ts',
      'src/new\nline.txt',
      'src/with space.txt',
    ]);
    const alias = all.find((e) => e.path === 'src/alias.ts');
    assert.deepEqual(alias, { name: 'alias.ts', path: 'src/alias.ts', type: 'file', isSymlink: true, symlinkTarget: 'a.ts' });
    assert.equal(all.find((e) => e.path === 'src/lib')?.type, 'directory');
    assert.equal(all.find((e) => e.path === 'src/a.ts')?.size, 0);

    const hidden = (await fs.walk('.', { includeHidden: true })).map((e) => e.path);
    assert.ok(hidden.includes('.env') && hidden.includes('.hidden/x/c.ts'), hidden.join(','));
    assert.deepEqual((await fs.walk('src', { maxDepth: 1 })).map((e) => e.path).sort(), [
      'a.ts',
      'alias.ts',
      'lib',
      'new\nline.txt',
      'with space.txt',
    ]);
    await assert.rejects(fs.walk('src/a.ts'), NotDirectoryError);
    await assert.rejects(fs.walk('nope'), DirectoryNotFoundError);

    // readdir recursive with maxDepth and extension, from the same one command
    const r = await fs.readdir('src', { recursive: true, extension: '.ts' });
    assert.deepEqual(r.filter((e) => e.type === 'file').map((e) => e.name).sort(), ['a.ts', 'alias.ts', 'lib/b.ts']);
    assert.deepEqual((await fs.readdir('src', { recursive: true, maxDepth: 0 })).map((e) => e.name).includes('lib/b.ts'), false);
  });
});

describe('IronClawFilesystem on an image whose find lacks -printf', () => {
  test('readdir falls back to the daemon file API; ~ is the workspace', async () => {
    const sandbox = new IronClawWorkspaceSandbox({ ...srv.conn, env: { PATH: '/workspace/bin:/usr/local/bin:/usr/bin:/bin' } });
    const fs = new IronClawFilesystem({ sandbox });
    srv.cleanup.push(() => sandbox.destroy());
    await sandbox.writeFiles([
      { path: 'bin/find', content: "#!/bin/sh\necho \"find: unrecognized: -printf\" >&2\nexit 1\n", mode: 0o755 },
      { path: 'd/e/f.txt', content: 'x' },
    ]);
    assert.equal((await sandbox.executeCommand('command -v find')).stdout, '/workspace/bin/find\n');
    assert.deepEqual((await fs.readdir('/')).map((e) => `${e.name}:${e.type}`).sort(), ['bin:directory', 'd:directory']);
    assert.deepEqual((await fs.readdir('~/d', { recursive: true })).map((e) => e.name), ['e', 'e/f.txt']);
    await assert.rejects(fs.readdir('d/e/f.txt'), NotDirectoryError);
    await assert.rejects(fs.readdir('nope'), DirectoryNotFoundError);
  });
});

describe('grep', () => {
  test('the JS regex to ERE translation', () => {
    assert.equal(jsRegexToERE('TODO|FIXME'), 'TODO|FIXME');
    assert.equal(jsRegexToERE('function\\s+\\w+\\('), `function([[:space:]]|${[...'\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff'].join('|')})+[0-9A-Z_a-z]+\\(`);
    assert.equal(jsRegexToERE('a.b'), 'a(.{1,4})b');
    assert.equal(jsRegexToERE('[^a-c]x{2,3}?'), '([^a-c]{1,4})x{2,3}');
    assert.equal(jsRegexToERE('[\\]\\-^[]'), '[]^[-]');
    assert.equal(jsRegexToERE('(?:ab)+\\.\\$'), '(ab)+\\.\\$');
    assert.throws(() => jsRegexToERE('a(?=b)'), UnsupportedGrepPatternError);
    assert.throws(() => jsRegexToERE('(a)\\1'), UnsupportedGrepPatternError);
    assert.throws(() => jsRegexToERE('é', false), UnsupportedGrepPatternError);
  });

  test('grep finds exactly the lines the JS regex finds (a differential over many patterns)', async () => {
    const { fs } = await workspace();
    const lines = [
      'foo bar', 'fooooo', '  // comment', 'a word here', 'swordfish', 'ABC def', 'AB', 'a|b', '555-1234',
      'x.y', 'xzy', 'x\u00e9y', 'naïve café', 'ÉCOLE école', 'tab\there', 'nbsp\u00a0here', 'crlf line\r',
      '${var}', '[]', 'a/b', 'ababc', 'color', 'colour', ']', '-', 'aa', 'a{,2}', '{}', 'A', 'emoji 😀 x',
      '', 'UPPER lower', '\\back\\slash', 'end$', '^start', 'q?', 'star*', 'plus+', '(paren)',
    ];
    await fs.writeFile('d/t.txt', lines.join('\n') + '\n');
    const patterns = [
      'foo', 'fo+', '^\\s*//', '\\bword\\b', '[A-Z]{2,}', 'a\\|b', 'a|b', '\\d{3}-\\d{4}', '[^a-z ]', 'x.y', 'é',
      '\\$\\{', '\\[\\]', '\\.', 'a\\/b', '(ab)*c', 'colou?r', '[\\]]', '[-a]', '[a-]', '\\W+', '\\S\\s\\S',
      '\\u0041', '\\x41', 'a{2}', '{', '}', ']', 'a{,2}', '\\t', 'here$', '^$', '.', 'caf.', '[^\\s]+😀',
      '\\s', 'nbsp\\shere', '\\D\\d', '\\\\', 'end\\$', '\\^start', 'q\\?', 'star\\*', 'plus\\+', '\\(paren\\)',
      '(?:co)lou?r', 'o{2,3}?', '[\\w-]+', 'line\\r',
    ];
    for (const caseSensitive of [true, false]) {
      for (const pattern of patterns) {
        // ~100 searches: stay under the daemon's per-token request rate (50/s) that the other tests share
        await new Promise((r) => setTimeout(r, 40));
        const re = new RegExp(pattern, caseSensitive ? '' : 'i');
        const want = lines.flatMap((l, i) => (re.test(l) ? [i + 1] : []));
        let got: number[];
        try {
          const res = await fs.grep({ pattern, path: 'd', caseSensitive, includeHidden: false });
          got = res.flatMap((r) => r.matches.map((m) => m.line));
          for (const r of res) for (const m of r.matches) assert.equal(m.column, re.exec(m.text)!.index, pattern);
        } catch (err) {
          assert.ok(err instanceof UnsupportedGrepPatternError, `${pattern}: ${String(err)}`);
          continue; // Mastra searches on the host then
        }
        assert.deepEqual(got, want, `pattern ${JSON.stringify(pattern)} caseSensitive=${caseSensitive}`);
      }
    }
  });

  test('grep over 500 files in one request; context, case, hidden, odd names; the JS regex decides', async (t) => {
    const c = counting();
    const { sandbox, fs, ws } = await workspace({ fetch: c.fetch });
    const mk = await sandbox.executeCommand(
      "nl=$(printf '\\nx'); nl=${nl%x}; " +
        'mkdir -p src/deep .git && for i in $(seq 1 500); do d=src; [ $((i % 2)) = 0 ] && d=src/deep; ' +
        'if [ $((i % 20)) = 0 ]; then printf "head\\nconst NEEDLE_%d = 1; // x\\ntail\\n" $i > $d/f$i.ts; ' +
        'else printf "nothing here %d\\n" $i > $d/f$i.ts; fi; done; ' +
        "printf 'NEEDLE_hidden\\n' > .secret.ts; printf 'NEEDLE_git\\n' > .git/config; " +
        "printf 'x\\nneedle_lower\\n' > \"src/odd${nl}name.ts\"",
    );
    assert.equal(mk.exitCode, 0, mk.stderr);
    c.calls.length = 0;
    const res = await fs.grep({ pattern: 'NEEDLE_\\d+', path: '/', caseSensitive: true, includeHidden: false });
    t.diagnostic(`fs.grep over 500 files: ${c.calls.length} request(s)`);
    assert.ok(c.calls.length <= 2, c.calls.join('\n'));
    const hits = res.flatMap((r) => r.matches.map((m) => ({ path: r.path, ...m })));
    assert.equal(hits.length, 25);
    const f20 = hits.find((h) => h.path === 'src/deep/f20.ts');
    assert.deepEqual(f20, { path: 'src/deep/f20.ts', line: 2, column: 6, text: 'const NEEDLE_20 = 1; // x' });

    const ci = await fs.grep({ pattern: 'needle_[a-z]+', path: 'src', caseSensitive: false, includeHidden: false, contextLines: 1 });
    assert.deepEqual(ci, [{ path: 'odd\nname.ts', matches: [{ line: 2, column: 0, text: 'needle_lower', before: ['x'], after: [] }] }]);
    const hidden = await fs.grep({ pattern: 'NEEDLE_h', path: '.', caseSensitive: true, includeHidden: true });
    assert.deepEqual(hidden.map((r) => r.path), ['.secret.ts']);
    const capped = await fs.grep({ pattern: 'NEEDLE', path: '.', caseSensitive: true, includeHidden: false, maxTotalMatches: 3 });
    assert.equal(capped.flatMap((r) => r.matches).length, 3);
    // the ERE is wider than the JS regex here ('.' is up to 4 bytes); the JS regex has the last word
    assert.deepEqual(await fs.grep({ pattern: 'NEEDLE.2 ', path: '.', caseSensitive: true, includeHidden: false }), []);
    await assert.rejects(
      fs.grep({ pattern: 'NEEDLE(?=_)', path: '.', caseSensitive: true, includeHidden: false }),
      UnsupportedGrepPatternError,
    );

    // Mastra's built-in grep and list_files tools through a real Agent: a handful of requests, not 500
    const agent = new Agent({
      id: 'grep-agent',
      name: 'Grep Agent',
      instructions: 'Search the workspace.',
      model: await proxyModel(),
      workspace: ws,
    });
    c.calls.length = 0;
    const g = await agent.generate(mockCall('mastra_workspace_grep', { pattern: 'NEEDLE_\\d+' }));
    const out = String(g.toolResults.map((r: any) => r.payload.result));
    assert.equal((out.match(/NEEDLE_\d+/g) ?? []).length, 25, out);
    assert.match(out, /src\/deep\/f20\.ts:2:7: const NEEDLE_20/);
    t.diagnostic(`the Agent's grep tool: ${c.calls.length} request(s): ${c.calls.join(', ')}`);
    assert.ok(c.calls.length <= 10, `requests for the agent's grep: ${c.calls.length}\n${c.calls.join('\n')}`);

    c.calls.length = 0;
    const l = await agent.generate(mockCall('mastra_workspace_list_files', { path: 'src', maxDepth: 3 }));
    const listing = String(l.toolResults.map((r: any) => r.payload.result));
    assert.match(listing, /f500\.ts/);
    t.diagnostic(`the Agent's list_files tool: ${c.calls.length} request(s): ${c.calls.join(', ')}`);
    assert.ok(c.calls.length <= 10, `requests for the agent's list_files: ${c.calls.length}\n${c.calls.join('\n')}`);
  });
});

describe('IronClawWorkspaceSandbox results (LocalSandbox semantics)', () => {
  test('abort: killed result with the output so far; timeout: 124 and the message; maxRetainedBytes', async () => {
    const ws = new IronClawWorkspaceSandbox(srv.conn);
    srv.cleanup.push(() => ws.destroy());
    const ac = new AbortController();
    const seen: string[] = [];
    const p = ws.executeCommand('echo before; echo err >&2; sleep 20; echo after', [], {
      abortSignal: ac.signal,
      onStdout: (s) => {
        seen.push(s);
        ac.abort();
      },
    });
    const r = await p;
    assert.equal(r.success, false);
    assert.equal(r.exitCode, 128);
    assert.equal(r.killed, true);
    assert.equal(r.timedOut, false);
    assert.equal(r.stdout, 'before\n');
    assert.deepEqual(seen, ['before\n']);
    assert.equal(r.command, 'echo before; echo err >&2; sleep 20; echo after');
    // an already-aborted signal runs nothing
    const pre = await ws.executeCommand('touch ran', [], { abortSignal: AbortSignal.abort() });
    assert.equal(pre.killed, true);
    assert.equal((await ws.executeCommand('test -e ran')).exitCode, 1);

    const err: string[] = [];
    const t = await ws.executeCommand('echo started; sleep 5', [], { timeout: 300, onStderr: (s) => err.push(s) });
    assert.equal(t.exitCode, 124);
    assert.equal(t.timedOut, true);
    assert.equal(t.killed, true);
    assert.equal(t.stdout, 'started\n');
    assert.match(t.stderr, /\nProcess timed out after 300ms$/);
    assert.equal(err.join(''), t.stderr);

    const m = await ws.executeCommand('printf', ['abcdefghij'], { maxRetainedBytes: 4 });
    assert.equal(m.stdout, 'ghij');
    assert.equal(m.stdoutTruncated, true);
    assert.equal(m.stdoutDroppedBytes, 6);
    assert.equal(m.stderrTruncated, false);
    assert.equal(m.stderrDroppedBytes, 0);
    assert.equal(m.command, 'printf abcdefghij');
    const u = await ws.executeCommand("printf 'aé€' >&2", [], { maxRetainedBytes: 4 });
    assert.equal(u.stderr, '€', 'whole code points are kept');
    assert.equal(u.stderrDroppedBytes, 3);
    const none = await ws.executeCommand('echo hi');
    assert.equal(none.stdoutDroppedBytes, 0);
    assert.equal(none.stdoutTruncated, false);
  });

  test('a sandbox the daemon ended is made anew on the next call, for commands and files', async () => {
    const sandbox = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'recover-1' });
    const fs = new IronClawFilesystem({ sandbox });
    srv.cleanup.push(() => sandbox.destroy());
    await sandbox.executeCommand('echo x > f');
    const first = sandbox.sandboxId!;
    // ended outside the adapter (as the idle reaper or a crash would)
    assert.equal((await srv.d.agent('DELETE', `/v1/sandboxes/${first}`)).status, 200);
    const r = await sandbox.executeCommand('echo again');
    assert.equal(r.stdout, 'again\n');
    const second = sandbox.sandboxId!;
    assert.notEqual(second, first);
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${second}`)).body.labels[MASTRA_ID_LABEL], 'recover-1');
    assert.equal(sandbox.status, 'running');

    await srv.d.agent('DELETE', `/v1/sandboxes/${second}`);
    await fs.writeFile('after.txt', 'fresh');
    assert.notEqual(sandbox.sandboxId, second);
    assert.equal(await fs.readFile('after.txt', { encoding: 'utf-8' }), 'fresh');
  });

  test('get-or-create is atomic: concurrent starts share one sandbox; a lost cross-process race is undone', async () => {
    const a = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'race-1' });
    const b = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'race-1' });
    srv.cleanup.push(() => a.destroy());
    const [ra, rb] = await Promise.all([a.start(), b.start()]);
    assert.deepEqual([ra, rb].map((r) => r?.outcome).sort(), ['connected', 'created']);
    assert.equal(a.sandboxId, b.sandboxId);
    const listed = await IronClawSandbox.list({ ...srv.conn, labels: { [MASTRA_ID_LABEL]: 'race-1' } });
    assert.equal(listed.length, 1);

    // a start that joined another's aborted start goes on by itself
    const ac = new AbortController();
    const x = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'race-3' });
    const y = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'race-3' });
    srv.cleanup.push(() => y.destroy());
    const px = x.start({ abortSignal: ac.signal });
    const py = y.start();
    ac.abort();
    await assert.rejects(px, SandboxAbortError);
    assert.deepEqual(await py, { outcome: 'created' });
    assert.match(y.sandboxId ?? '', /^sbx-/);

    // another process created one between our lookup and our create: ours goes, theirs is used
    const theirs = await IronClawSandbox.create({ ...srv.conn, labels: { [MASTRA_ID_LABEL]: 'race-2' } });
    srv.cleanup.push(() => theirs.destroy());
    let hidden = false;
    const racing: typeof globalThis.fetch = async (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      if (!hidden && (init?.method ?? 'GET') === 'GET' && /\/v1\/sandboxes\?/.test(url)) {
        hidden = true; // the first lookup misses it, as if it did not exist yet
        return new Response(JSON.stringify({ sandboxes: [] }), { headers: { 'content-type': 'application/json' } });
      }
      return globalThis.fetch(input, init);
    };
    const c = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'race-2', fetch: racing });
    assert.deepEqual(await c.start(), { outcome: 'connected' });
    assert.equal(c.sandboxId, theirs.id);
    const left = await IronClawSandbox.list({ ...srv.conn, labels: { [MASTRA_ID_LABEL]: 'race-2' } });
    assert.deepEqual(left.map((s) => s.id), [theirs.id]);
  });

  test('start honours abortSignal; destroy leaves the object usable; stop pauses', async () => {
    const ws = new IronClawWorkspaceSandbox({ ...srv.conn, id: 'life-1' });
    srv.cleanup.push(() => ws.destroy());
    await assert.rejects(ws.start({ abortSignal: AbortSignal.abort() }), SandboxAbortError);
    assert.equal((await IronClawSandbox.list({ ...srv.conn, labels: { [MASTRA_ID_LABEL]: 'life-1' } })).length, 0);
    assert.deepEqual(await ws.start(), { outcome: 'created' });
    const first = ws.sandboxId;
    await ws._stop();
    assert.equal((await srv.d.agent('GET', `/v1/sandboxes/${first}`)).body.state, 'paused', 'stop pauses');
    await ws._destroy();
    assert.equal(ws.status, 'destroyed');
    assert.deepEqual(await ws.start(), { outcome: 'created' });
    assert.notEqual(ws.sandboxId, first);
    assert.equal((await ws.executeCommand('echo ok')).stdout, 'ok\n');

    // a new process (a new object, never started) ends the workspace by its logical id
    await new IronClawWorkspaceSandbox({ ...srv.conn, id: 'life-1' }).destroy();
    assert.equal((await IronClawSandbox.list({ ...srv.conn, labels: { [MASTRA_ID_LABEL]: 'life-1' } })).length, 0);
    await new IronClawWorkspaceSandbox({ ...srv.conn, id: 'life-never' }).destroy(); // nothing to end: fine
  });

  test('clone: a sibling from the same configuration, no I/O until it starts', async () => {
    const c = counting();
    const base = new IronClawWorkspaceSandbox({ ...srv.conn, fetch: c.fetch, id: 'clone-src', env: { A: '1' }, workingDirectory: '/tmp' });
    const sib = base.clone({ idleTimeoutMinutes: 5, env: { A: '2' } });
    srv.cleanup.push(() => sib.destroy());
    assert.ok(sib instanceof IronClawWorkspaceSandbox);
    assert.notEqual(sib.id, base.id);
    assert.equal(sib.workingDirectory, '/tmp');
    assert.equal(c.calls.length, 0);
    assert.equal((await sib.executeCommand('echo $A; pwd')).stdout, '2\n/tmp\n');
    await sib.executeCommand('mkdir -p sub');
    assert.equal((await sib.executeCommand('pwd', [], { cwd: 'sub' })).stdout, '/tmp/sub\n', 'a relative cwd is under workingDirectory');
    const info = await sib.getInfo();
    assert.equal(info.timeoutAt!.getTime() - info.lastUsedAt!.getTime(), 300_000);
    const again = sib.clone({ sandboxId: sib.sandboxId! });
    assert.deepEqual(await again.start(), { outcome: 'connected' });
    assert.equal(again.sandboxId, sib.sandboxId);
    assert.throws(() => new IronClawWorkspaceSandbox({ sandbox: new IronClawSandbox(srv.conn) }).clone(), /shared client/);
  });

  test('getInfo has resources and mounts; instructions take the function form; writeFiles checks modes', async () => {
    const ws = new IronClawWorkspaceSandbox({
      ...srv.conn,
      idleMs: 600_000,
      limits: { memory: '256MiB' },
      instructions: ({ defaultInstructions, requestContext }) =>
        `${defaultInstructions} User: ${String(requestContext?.get('user') ?? 'nobody')}.`,
    });
    srv.cleanup.push(() => ws.destroy());
    await ws.start();
    const info = await ws.getInfo();
    assert.deepEqual(info.mounts, []);
    assert.ok(info.timeoutAt && info.lastUsedAt, 'timeoutAt from the idle timeout');
    assert.equal(info.timeoutAt.getTime() - info.lastUsedAt.getTime(), 600_000);
    assert.ok(info.resources, 'resources');
    assert.equal(info.resources.memoryMB, 256);
    assert.ok((info.resources.memoryUsedMB ?? -1) >= 0, JSON.stringify(info.resources));
    assert.ok((info.resources.diskMB ?? 0) > 0, JSON.stringify(info.resources));

    const rc = new RequestContext();
    rc.set('user', 'ada');
    assert.match(ws.getInstructions({ requestContext: rc }), /IronClaw Linux sandbox.*User: ada\.$/s);
    assert.match(ws.getInstructions(), /User: nobody\.$/);

    for (const mode of [0, 0o4755, 0o1000, 1.5]) {
      await assert.rejects(ws.writeFiles([{ path: 'x', content: 'y', mode }]), (e: unknown) => {
        assert.ok(e instanceof MastraSandboxError, String(e));
        assert.equal((e as MastraSandboxError).code, 'INVALID_ARGUMENT');
        return true;
      });
    }
    assert.equal((await ws.executeCommand('test -e x')).exitCode, 1, 'nothing written');
    await ws.writeFiles([{ path: 'ok.sh', content: 'echo ok', mode: 0o700 }]);
    assert.equal((await ws.executeCommand('stat -c %a ok.sh')).stdout, '700\n');
    await assert.rejects(
      ws.writeFiles([{ path: 'y', content: 'z' }], { abortSignal: AbortSignal.abort() }),
      SandboxAbortError,
    );
  });
});

describe("Mastra's built-in workspace tools through an Agent", () => {
  test('write, read, edit, stat, mkdir, list, delete and execute_command on a leading-slash path', async () => {
    const { sandbox, ws } = await workspace();
    const agent = new Agent({
      id: 'tools-agent',
      name: 'Tools Agent',
      instructions: 'Work in the workspace.',
      model: await proxyModel(),
      workspace: ws,
    });
    const call = async (tool: string, args: unknown) => {
      const r = await agent.generate(mockCall(`mastra_workspace_${tool}`, args));
      return String(r.toolResults.map((x: any) => JSON.stringify(x.payload.result)));
    };
    assert.match(await call('write_file', { path: '/src/app.ts', content: 'export const a = 1;\n' }), /Wrote 20 bytes/);
    assert.equal(await sandbox.client.readTextFile('/workspace/src/app.ts'), 'export const a = 1;\n');
    assert.match(await call('read_file', { path: '/src/app.ts' }), /export const a = 1;/);
    assert.match(await call('edit_file', { path: 'src/app.ts', old_string: 'a = 1', new_string: 'a = 2' }), /src\/app\.ts/);
    assert.equal(await sandbox.client.readTextFile('src/app.ts'), 'export const a = 2;\n');
    const stat = await call('file_stat', { path: '/src/app.ts' });
    assert.match(stat, /file/i);
    assert.match(await call('mkdir', { path: '/src/lib/deep' }), /src\/lib\/deep/);
    const list = await call('list_files', { path: '/', maxDepth: 5 });
    assert.match(list, /app\.ts/);
    assert.match(list, /deep/);
    assert.match(await call('delete', { path: '/src/lib', recursive: true }), /src\/lib/);
    assert.equal((await sandbox.executeCommand('test -e src/lib')).exitCode, 1);
    const slow = await call('execute_command', { command: 'echo started; sleep 5', timeout: 1 });
    assert.match(slow, /started/);
    assert.match(slow, /Process timed out after 1000ms/);
    const escape = await call('read_file', { path: '../etc/passwd' });
    assert.doesNotMatch(escape, /root:/);
  });
});

describe('mounts', () => {
  test('Workspace({ mounts }) on an IronClaw sandbox: each mount is an error, not silently skipped', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'h5-mount-'));
    const sandbox = new IronClawWorkspaceSandbox(srv.conn);
    const ws = new Workspace({ sandbox, mounts: { '/data': new LocalFilesystem({ basePath: dir }) } });
    srv.cleanup.push(() => ws.destroy());
    await ws.init();
    const entry = sandbox.mounts?.get('/data');
    assert.equal(entry?.state, 'error');
    assert.match(entry?.error ?? '', /mount only IronClaw volumes/);
    assert.deepEqual((await sandbox.getInfo()).mounts, []);
    rmSync(dir, { recursive: true, force: true });
  });
});
