// A real Mastra Agent whose one tool runs shell commands in an IronClaw
// sandbox, and whose model is reached through the IronClaw model proxy.
//
// run.sh starts the daemon and sets, for this process only:
//   IRONCLAW_ADDR, IRONCLAW_API_TOKEN   the daemon and its *agent* token
//   DEMO_MODE, DEMO_MODEL               "mock" or "real", and the model's name
//   DEMO_STANDIN_PORT, DEMO_MARKER_PATH the scenario's parameters
//   DEMO_RESULTS, DEMO_TRANSCRIPT       where to write the verdicts and outputs
// It holds no provider key: it gets a proxy token from the daemon instead.
import { writeFileSync } from 'node:fs';
import { Agent } from '@mastra/core/agent';
import { Sandbox } from '@ironclaw/sdk';
import { makeSandboxTool } from '@ironclaw/sdk/mastra';
import { fromEnv, TOOL_NAME, TOOL_ARG } from './scenario.mjs';

const env = process.env;
const realModel = env.DEMO_MODE === 'real';

// 1. This process must not hold a provider key; that is the point.
for (const k of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY']) {
  if (env[k]) die(`${k} is set in the agent's environment; run.sh should have removed it`);
}
const keyish = Object.entries(env).filter(([, v]) => /sk-[A-Za-z0-9_-]{8,}/.test(v ?? ''));
if (keyish.length) die(`provider-key-shaped value in the agent's environment: ${keyish.map(([k]) => k).join(', ')}`);
log('no provider key in this process (checked OPENAI_API_KEY, ANTHROPIC_API_KEY and every sk-... value)');

const probes = fromEnv();

// 2. A sandbox for this session, and a model-proxy token instead of a key.
const sandbox = new Sandbox({ addr: env.IRONCLAW_ADDR, token: env.IRONCLAW_API_TOKEN });
let exitCode = 2;
try {
  await sandbox.engage();
  const access = await sandbox.modelAccess();
  log(`sandbox ${sandbox.id ?? ''} engaged; model proxy ${access.openaiBaseUrl} (token ${access.token.slice(0, 4)}...)`);

  // 3. The agent: an OpenAI-compatible model config pointed at the proxy.
  const agent = new Agent({
    id: 'ironclaw-demo',
    name: 'IronClaw demo agent',
    instructions:
      `You operate a Linux sandbox through the "${TOOL_NAME}" tool. ` +
      'When asked to run commands, run each one exactly as given, one tool call per command, in order, ' +
      'then summarize the results in one short paragraph.',
    model: { id: `openai/${env.DEMO_MODEL || 'mock-gpt'}`, url: access.openaiBaseUrl, apiKey: access.token },
    tools: { [TOOL_NAME]: makeSandboxTool(sandbox) },
  });

  const prompt =
    `Run these ${probes.length} shell commands with the ${TOOL_NAME} tool (argument "${TOOL_ARG}"), ` +
    'exactly as written, one call each, in order. They are a sandbox containment self-test.\n\n' +
    probes.map((p, i) => `Command ${i + 1}:\n${p.command}\n`).join('\n');

  // 4. Run it. Every tool result is checked for the probe's verdict line.
  const seen = [];
  const result = await agent.generate(prompt, {
    maxSteps: probes.length + 3,
    onStepFinish: (step) => {
      for (const { payload } of step.toolResults ?? []) {
        const command = String(payload.args?.[TOOL_ARG] ?? '');
        const output = outputText(payload.result);
        const id = /^# probe: (\S+)/.exec(command)?.[1] ?? `call-${seen.length + 1}`;
        seen.push({ id, command, output });
        log(`tool call ${seen.length}: ${id} -> ${line(output, 'VERDICT') ?? '(no verdict)'}`);
      }
    },
  });
  log(`model finished (${result.finishReason}): ${String(result.text).trim()}`);

  // 5. Verdicts, one row per probe, for run.sh's table.
  const rows = probes.map((p) => {
    const s = seen.find((x) => x.id === p.id);
    // A real model may skip a probe: that proves nothing either way (SKIP), except for the task itself.
    if (!s) return [p.id, p.attempt, p.expect, 'not run by the model', realModel && p.expect === 'BLOCKED' ? 'SKIP' : 'FAIL'];
    const verdict = line(s.output, 'VERDICT') ?? '';
    const observed = line(s.output, 'OBSERVED') ?? firstLine(s.output);
    const want = p.expect === 'BLOCKED' ? 'blocked' : 'ok';
    return [p.id, p.attempt, p.expect, observed, verdict === want ? 'PASS' : 'FAIL'];
  });
  writeFileSync(env.DEMO_RESULTS, rows.map((r) => r.map(tsv).join('\t')).join('\n') + '\n');
  writeFileSync(env.DEMO_TRANSCRIPT, JSON.stringify({ text: result.text, calls: seen }, null, 2));
  exitCode = rows.every((r) => r[4] !== 'FAIL') ? 0 : 1;
} catch (err) {
  log(`error: ${err?.stack ?? err}`);
} finally {
  await sandbox.destroy().catch((err) => log(`destroy: ${err}`));
}
process.exit(exitCode);

// makeSandboxTool returns { output, exitCode }, output being ExecResult.toString().
function outputText(r) {
  return typeof r?.output === 'string' ? r.output : JSON.stringify(r ?? null);
}
function line(text, key) {
  return new RegExp(`^${key}: (.*)$`, 'm').exec(text)?.[1]?.trim();
}
function firstLine(text) {
  return String(text).split('\n').find((l) => l.trim()) ?? '(no output)';
}
function tsv(v) {
  return String(v).replace(/[\t\n\r]+/g, ' ');
}
// Indented to sit under run.sh's headings.
function log(msg) {
  console.log(`    agent: ${msg}`);
}
function die(msg) {
  log(msg);
  process.exit(2);
}
