import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs } from 'ai';
import type { Tool } from 'ai';
import { IronClawSandbox } from '../src/index.js';
import { sandboxTool as aiSdkTool, processTools as aiSdkProcessTools } from '../src/ai-sdk.js';
import { sandboxTool as langchainTool, processTools as langchainProcessTools } from '../src/langchain.js';
import { daemonPerFile, eventually } from './helpers/daemon.js';

let sbx: IronClawSandbox;
const srv = daemonPerFile({ policy: { ports: { inbound: true } }, args: ['--ports-listen', '127.0.0.1:0'] }, async (s) => {
  sbx = await IronClawSandbox.create({ ...s.conn, ports: [3000] });
  s.cleanup.push(() => sbx.destroy());
});

describe('ai-sdk', () => {
  test('execute runs the command in the sandbox', async () => {
    const t = aiSdkTool(sbx);
    assert.match(String(t.description), /isolated Linux sandbox/);
    const out = await t.execute!({ command: 'echo hi; id -u' }, { toolCallId: 'c1', messages: [] } as any);
    assert.deepEqual(out, { output: 'hi\n65532\n[exit 0]', exitCode: 0 });
  });

  test('abortSignal cancels the command', async () => {
    const t = aiSdkTool(sbx);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(
      Promise.resolve(t.execute!({ command: 'sleep 20' }, { toolCallId: 'c2', messages: [], abortSignal: ac.signal } as any)),
      { code: 'aborted' },
    );
  });

  test('generateText drives it through the IronClaw model proxy (mock provider)', async () => {
    const access = await sbx.modelAccess();
    const openai = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token });
    const res = await generateText({
      model: openai.chat('gpt-4o-mini'),
      tools: { sandbox_shell: aiSdkTool(sbx) },
      stopWhen: stepCountIs(3),
      prompt: JSON.stringify({ mock_tool_calls: [{ name: 'sandbox_shell', arguments: { command: 'echo via-ai-sdk' } }] }),
    });
    const results = res.steps.flatMap((s) => s.toolResults.map((r) => r.output));
    assert.deepEqual(results, [{ output: 'via-ai-sdk\n[exit 0]', exitCode: 0 }]);
    assert.match(res.text, /via-ai-sdk/);
  });
});

describe('langchain', () => {
  test('invoke runs the command and returns the text for the model', async () => {
    const t = langchainTool(sbx);
    assert.equal(t.name, 'sandbox_shell');
    assert.match(t.description, /isolated Linux sandbox/);
    const out = await t.invoke({ command: 'echo from-langchain; exit 5' });
    assert.equal(out, 'from-langchain\n[exit 5]');
  });

  test('invoke with a tool call gives a ToolMessage', async () => {
    const t = langchainTool(sbx, { name: 'shell' });
    const msg: any = await t.invoke({
      id: 'call-7',
      name: 'shell',
      args: { command: 'printf x' },
      type: 'tool_call',
    });
    assert.equal(msg.tool_call_id, 'call-7');
    assert.equal(msg.content, 'x\n[exit 0]');
  });

  test('the schema rejects bad input', async () => {
    const t = langchainTool(sbx);
    await assert.rejects(t.invoke({ command: 42 } as any));
  });
});

const SERVER = `exec python3 -c "import http.server as h
class H(h.BaseHTTPRequestHandler):
  def do_GET(s):
    b=('hello '+s.path).encode(); s.send_response(200); s.send_header('content-length',str(len(b))); s.end_headers(); s.wfile.write(b)
h.HTTPServer(('127.0.0.1',3000),H).serve_forever()"`;

async function fetchText(url: string): Promise<string> {
  return eventually(async () => {
    const res = await fetch(url).catch(() => undefined);
    return res?.ok ? res.text() : undefined;
  });
}

/** Runs an AI SDK tool's execute (its result as the plain value it is here). */
async function exec<I, O>(t: Tool<I, O>, input: I): Promise<O> {
  return (await t.execute!(input, { toolCallId: 'p1', messages: [] } as any)) as O;
}

describe('ai-sdk process and port tools', () => {
  test('start_process, process_output from an offset, send_stdin, kill_process', async () => {
    const t = aiSdkProcessTools(sbx);
    assert.deepEqual(Object.keys(t).sort(), ['kill_process', 'port_url', 'process_output', 'send_stdin', 'start_process']);
    const started = await exec(t.start_process, { command: 'echo ready; cat', stdin: true });
    assert.ok(started.pid > 0, JSON.stringify(started));
    const first = await eventually(async () => {
      const o = await exec(t.process_output, { pid: started.pid });
      return o.stdout === 'ready\n' ? o : undefined;
    });
    assert.equal(first.state, 'running');
    await exec(t.send_stdin, { pid: started.pid, data: 'echoed\n', close: true });
    const rest = await exec(t.process_output, { pid: started.pid, offset: first.offset, wait: true });
    assert.deepEqual({ ...rest, pid: 0 }, { pid: 0, state: 'exited', exitCode: 0, stdout: 'echoed\n', stderr: '', offset: first.offset + 7 });

    const long = await exec(t.start_process, { command: 'echo up; sleep 60' });
    await eventually(async () => (await exec(t.process_output, { pid: long.pid })).stdout === 'up\n');
    const killed = await exec(t.kill_process, { pid: long.pid });
    assert.equal(killed.exitCode, 137);
    assert.match(killed.output, /up/);
    await assert.rejects((exec(t.process_output, { pid: long.pid })), { code: 'not_found' });
  });

  test('port_url reaches a server the sandbox runs; generateText drives start_process', async () => {
    const t = aiSdkProcessTools(sbx, { portUrlTtlMs: 60_000 });
    const access = await sbx.modelAccess();
    const openai = createOpenAI({ baseURL: access.openaiBaseUrl, apiKey: access.token });
    const res = await generateText({
      model: openai.chat('gpt-4o-mini'),
      tools: { ...t },
      stopWhen: stepCountIs(2),
      prompt: JSON.stringify({ mock_tool_calls: [{ name: 'start_process', arguments: { command: SERVER } }] }),
    });
    const started = res.steps.flatMap((s) => s.toolResults.map((r) => r.output))[0] as { pid: number };
    assert.ok(started.pid > 0, JSON.stringify(started));
    const u = await exec(t.port_url, { port: 3000 });
    assert.match(u.url, /\/p\/.+\/$/);
    assert.ok(Date.parse(u.expiresAt) - Date.now() <= 60_000);
    assert.equal(await fetchText(`${u.url}ai`), 'hello /ai');
    await assert.rejects((exec(t.port_url, { port: 3001 })), { code: 'invalid_argument' });
    await exec(t.kill_process, { pid: started.pid });
  });
});

describe('langchain process and port tools', () => {
  test('the tools answer JSON text; a tool call gives a ToolMessage', async () => {
    const [start, output, stdin, kill, portUrl] = langchainProcessTools(sbx);
    assert.deepEqual([start, output, stdin, kill, portUrl].map((x) => x.name), [
      'start_process',
      'process_output',
      'send_stdin',
      'kill_process',
      'port_url',
    ]);
    const started = JSON.parse(await start.invoke({ command: SERVER }));
    assert.ok(started.pid > 0);
    const u = JSON.parse(await portUrl.invoke({ port: 3000 }));
    assert.equal(await fetchText(`${u.url}lc`), 'hello /lc');
    const msg: any = await output.invoke({ id: 'call-9', name: 'process_output', args: { pid: started.pid }, type: 'tool_call' });
    assert.equal(msg.tool_call_id, 'call-9');
    assert.equal(JSON.parse(msg.content).state, 'running');
    const k = JSON.parse(await kill.invoke({ pid: started.pid }));
    assert.equal(k.exitCode, 137);
    await assert.rejects(output.invoke({ pid: 'x' } as any));
    void stdin;
  });
});
