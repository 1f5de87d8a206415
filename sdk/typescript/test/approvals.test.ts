/**
 * The approval gateway, end to end: a daemon started with a policy that holds `curl` commands for approval,
 * decisions made with the operator token over the HTTP API (as the console or `ironclaw approvals` would).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ApprovalDeniedError,
  ApprovalRequiredError,
  ApprovalTimeoutError,
  IronClawSandbox,
  SandboxError,
  TimeoutError,
} from '../src/index.js';
import type { Approval, wire } from '../src/index.js';
import { sandboxTool as langchainTool } from '../src/langchain.js';
import { IronClawWorkspaceSandbox, makeSandboxTool } from '../src/mastra.js';
import { daemonPerFile, eventually } from './helpers/daemon.js';

let sbx: IronClawSandbox;
const srv = daemonPerFile({ policy: { exec: { require_approval: ['^curl '] } } }, async (s) => {
  sbx = await IronClawSandbox.create(s.conn);
  s.cleanup.push(() => sbx.destroy());
});

const seen = new Set<string>();

/** The next pending approval of this session and kind (one not returned before), as the operator sees it on the wire. */
async function pending(kind: string, session = sbx.id!): Promise<wire.Approval> {
  const a = await eventually(async () => {
    const r = await srv.d.operator('GET', `/v1/approvals?state=pending&session=${session}&kind=${kind}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return (r.body as wire.ApprovalList).approvals.find((x) => !seen.has(x.id));
  });
  seen.add(a.id);
  return a;
}

async function decide(id: string, how: 'approve' | 'deny', reason?: string): Promise<wire.Approval> {
  const r = await srv.d.operator('POST', `/v1/approvals/${id}/${how}`, reason ? { reason } : {});
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body as wire.Approval;
}

describe('requestApproval / waitForApproval', () => {
  test('files a tool.call for this sandbox; the long-poll answers as soon as an operator approves', async () => {
    const a = await sbx.requestApproval({
      kind: 'tool.call',
      data: { tool: 'deploy', input: { env: 'prod' } },
      note: 'deploy to prod',
    });
    assert.match(a.id, /^apr-/);
    assert.equal(a.state, 'pending');
    assert.equal(a.kind, 'tool.call');
    assert.equal(a.session, sbx.id);
    // The summary is the daemon's, from data; the agent's words are its note.
    assert.equal(a.summary, 'call the tool deploy');
    assert.equal(a.agentNote, 'deploy to prod');
    assert.equal(a.requestedBy, 'agent');
    assert.ok(a.createdAt instanceof Date && a.expiresAt instanceof Date && a.expiresAt > a.createdAt);
    assert.equal(a.decidedAt, undefined);
    assert.equal('agent_note' in a, false);
    assert.deepEqual(
      a.fields?.find((f) => f.name === 'arguments'),
      { name: 'arguments', value: '{"env":"prod"}', format: 'json' },
    );
    assert.deepEqual((await sbx.getApproval(a.id)).data, { tool: 'deploy', input: { env: 'prod' } });

    // a short wait gives it back still pending
    const early = await sbx.waitForApproval(a.id, { timeoutMs: 300 });
    assert.equal(early.state, 'pending');

    const t0 = Date.now();
    const waiting = sbx.waitForApproval(a.id);
    setTimeout(() => void decide(a.id, 'approve', 'looks fine'), 300);
    const final = await waiting;
    assert.equal(final.state, 'approved');
    assert.equal(final.reason, 'looks fine');
    assert.equal(final.decidedBy, 'operator', 'decidedBy is the operator token name');
    assert.ok(final.decidedAt instanceof Date);
    assert.ok(Date.now() - t0 < 3000, 'the long-poll returned promptly');
  });

  test('a denial comes back with its reason; the agent token cannot decide', async () => {
    const a = await sbx.requestApproval({ kind: 'tool.call', data: { tool: 'rm', input: {} } });
    const byAgent = await srv.d.agent('POST', `/v1/approvals/${a.id}/approve`, {});
    assert.equal(byAgent.status, 403);
    await decide(a.id, 'deny', 'no');
    const final = await sbx.waitForApproval(a.id);
    assert.equal(final.state, 'denied');
    assert.equal(final.reason, 'no');
  });

  test('waitForApproval honours its abort signal', async () => {
    const a = await sbx.requestApproval({ kind: 'tool.call', data: { tool: 't', input: null } });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(sbx.waitForApproval(a.id, { signal: ac.signal }), { name: 'AbortError', code: 'aborted' });
    await decide(a.id, 'deny');
  });

  test('unknown approval is not_found', async () => {
    await assert.rejects(sbx.getApproval('apr-0000000000000000'), { code: 'not_found' });
  });
});

describe('policy-gated exec', () => {
  const cmd = 'curl --version >/dev/null 2>&1; echo ran-after-approval';

  test("approval: 'fail' throws approval_required with the exec.command approval", async () => {
    await assert.rejects(sbx.run(cmd, { approval: 'fail' }), (err: unknown) => {
      assert.ok(err instanceof ApprovalRequiredError && err instanceof SandboxError);
      assert.equal(err.code, 'approval_required');
      assert.equal(err.status, 202);
      assert.equal(err.approval?.kind, 'exec.command');
      assert.equal(err.approval?.state, 'pending');
      assert.equal((err.approval?.data as { command?: string }).command, cmd);
      return true;
    });
    const a = await pending('exec.command');
    await decide(a.id, 'deny');
  });

  test('the first command of a handle not yet created waits for its approval too', async () => {
    const fresh = new IronClawSandbox(srv.conn);
    try {
      let held: Approval | undefined;
      const running = fresh.run(cmd, { onApproval: (a) => (held = a) });
      const a = await eventually(async () => (fresh.id ? pending('exec.command', fresh.id) : undefined));
      assert.equal(a.session, fresh.id);
      assert.equal((a.data as { mode?: string }).mode, 'stream');
      await decide(a.id, 'approve');
      const r = await running;
      assert.equal(r.stdout, 'ran-after-approval\n');
      assert.equal(held?.id, a.id);
      const failing = new IronClawSandbox(srv.conn);
      try {
        await assert.rejects(
          failing.run(cmd, { approval: 'fail' }),
          (err: unknown) => err instanceof ApprovalRequiredError && err.approval?.session === failing.id,
        );
      } finally {
        await failing.destroy();
      }
    } finally {
      await fresh.destroy();
    }
  });

  test('commands the policy does not mark run at once', async () => {
    const r = await sbx.run('echo not-curl', { approval: 'fail' });
    assert.equal(r.stdout, 'not-curl\n');
  });

  test("the default waits, and runs the command once an operator approves", async () => {
    const held: Approval[] = [];
    const p = sbx.run(cmd, { onApproval: (a) => held.push(a) });
    const a = await pending('exec.command');
    await decide(a.id, 'approve');
    const r = await p;
    assert.equal(held.length, 1);
    assert.equal(held[0]!.id, a.id);
    assert.equal(r.stdout, 'ran-after-approval\n');
    assert.equal(r.exitCode, 0);
  });

  test('a denied command throws approval_denied with the approval', async () => {
    let held: wire.Approval | undefined;
    // assert.rejects attaches its handler now: the rejection comes as soon as the operator decides
    const rejected = assert.rejects(sbx.run('curl http://example.com/ > /workspace/fetched'), (err: unknown) => {
      assert.ok(err instanceof ApprovalDeniedError);
      assert.equal(err.code, 'approval_denied');
      assert.equal(err.approval?.id, held?.id);
      assert.equal(err.approval?.state, 'denied');
      assert.match(err.message, /no downloads/);
      return true;
    });
    held = await pending('exec.command');
    await decide(held.id, 'deny', 'no downloads');
    await rejected;
    assert.equal((await sbx.run('test -e /workspace/fetched')).exitCode, 1);
  });

  test('approvalTimeoutMs gives up with approval_timeout', async () => {
    await assert.rejects(sbx.run('curl http://example.com/slow', { approvalTimeoutMs: 300 }), (err: unknown) => {
      assert.ok(err instanceof ApprovalTimeoutError && err instanceof TimeoutError);
      assert.equal(err.code, 'approval_timeout');
      assert.equal(err.approval?.state, 'pending');
      return true;
    });
    await decide((await pending('exec.command')).id, 'deny');
  });
});

describe('tools and approvals', () => {
  test('Mastra tool: a policy-denied command returns denied text to the model', async () => {
    const tool = makeSandboxTool(sbx);
    const p = tool.execute!({ command: 'curl http://example.com/x' }, {} as any);
    const a = await pending('exec.command');
    await decide(a.id, 'deny', 'not today');
    const out = (await p) as { output: string; exitCode: number; denied?: boolean };
    assert.equal(out.denied, true);
    assert.equal(out.exitCode, -1);
    assert.match(out.output, /^denied: an operator denied it \(not today\)/);
  });

  test('Mastra tool with requireApproval files a tool.call and runs once approved', async () => {
    const tool = makeSandboxTool(sbx, { requireApproval: true });
    const p = tool.execute!({ command: 'echo approved-run > /workspace/gated.txt; cat /workspace/gated.txt' }, {} as any);
    const a = await pending('tool.call');
    assert.deepEqual(a.data, {
      tool: 'sandbox_shell',
      input: { command: 'echo approved-run > /workspace/gated.txt; cat /workspace/gated.txt' },
    });
    await decide(a.id, 'approve');
    assert.deepEqual(await p, { output: 'approved-run\n[exit 0]', exitCode: 0 });
  });

  test('Mastra tool with requireApproval: a denial means the command never ran', async () => {
    const tool = makeSandboxTool(sbx, { requireApproval: true });
    const p = tool.execute!({ command: 'touch /workspace/should-not-exist' }, {} as any);
    const a = await pending('tool.call');
    await decide(a.id, 'deny');
    const out = (await p) as { output: string; denied?: boolean };
    assert.equal(out.denied, true);
    assert.match(out.output, /^denied: /);
    assert.equal((await sbx.run('test -e /workspace/should-not-exist')).exitCode, 1);
  });

  test('Mastra workspace sandbox: a policy-denied command is a failed result saying denied', async () => {
    const ws = new IronClawWorkspaceSandbox({ sandbox: sbx });
    const stderr: string[] = [];
    const p = ws.executeCommand('curl', ['http://example.com/'], { onStderr: (s) => stderr.push(s) });
    await decide((await pending('exec.command')).id, 'deny', 'blocked');
    const r = await p;
    assert.equal(r.success, false);
    assert.equal(r.exitCode, -1);
    assert.match(r.stderr, /^denied: .*blocked/);
    assert.deepEqual(stderr, [r.stderr]);
  });

  test('LangChain tool: denied text, not an exception', async () => {
    const t = langchainTool(sbx, { requireApproval: true });
    const p = t.invoke({ command: 'echo x' });
    await decide((await pending('tool.call')).id, 'deny', 'nope');
    assert.match(String(await p), /^denied: an operator denied it \(nope\)/);
  });
});

describe('create with egress hosts', () => {
  test('hosts off the policy allowlist come back as a pending sandbox.widen approval', async () => {
    const s = await IronClawSandbox.create({
      addr: srv.d.addr,
      token: srv.d.agentToken,
      egress: { allow: ['example.com:443'] },
    });
    try {
      assert.equal(s.approvals.length, 1);
      const a = s.approvals[0]!;
      assert.equal(a.kind, 'sandbox.widen');
      assert.equal(a.state, 'pending');
      assert.equal(a.session, s.id);
      const final = await s.waitForApproval(a.id, { timeoutMs: 200 });
      assert.equal(final.state, 'pending');
      await decide(a.id, 'approve');
      assert.equal((await s.getApproval(a.id)).state, 'approved');
    } finally {
      await s.destroy();
    }
  });
});
