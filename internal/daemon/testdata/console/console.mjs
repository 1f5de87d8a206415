// Drives the web console in headless Chromium: sign in with the operator
// token, decide one pending approval, and check the page shows the
// decision, its audit record and the live sandboxes. Any error in the page
// (an exception, a console error, a CSP violation) fails the run.
//
// env: IRONCLAW_URL, IRONCLAW_OPERATOR_TOKEN, APPROVAL_ID (required);
//      DECISION=approve|deny, SCOPE=sandbox|global, EXPECT_SANDBOX=sbx-...,
//      CHROMIUM (default /usr/bin/chromium).
// With MODE=spoof it decides nothing and instead checks that a spoofing
// attempt is displayed safely: APPROVAL_ID's row shows EXPECT_APPLY in its
// summary and fields and EXPECT_NOTE only in its labelled agent's note;
// ESC_ID's row (an argv full of control and bidi characters, ending in
// ESC_TAIL) shows them escaped and in full; no raw control or bidi
// character is anywhere on the page.
// Prints one JSON line {"ok":true,...} on success; exits 1 otherwise.
import { chromium } from 'playwright-core';

const TIMEOUT = 20_000;

function env(name, fallback) {
  const v = process.env[name] || fallback;
  if (v === undefined) throw new Error(`${name} is not set`);
  return v;
}

async function main() {
  const base = env('IRONCLAW_URL').replace(/\/+$/, '');
  const token = env('IRONCLAW_OPERATOR_TOKEN');
  const id = env('APPROVAL_ID');
  const decision = env('DECISION', 'approve');
  const scope = process.env.SCOPE || '';
  const expectSandbox = process.env.EXPECT_SANDBOX || '';
  if (decision !== 'approve' && decision !== 'deny') throw new Error(`DECISION must be approve or deny, not ${decision}`);
  const wantState = decision === 'approve' ? 'approved' : 'denied';
  const started = Date.now();

  const browser = await chromium.launch({
    executablePath: env('CHROMIUM', '/usr/bin/chromium'),
    headless: true,
    args: ['--no-sandbox'],
  });
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(TIMEOUT);

    // Every wait below races this, so a page error fails at once, not at a timeout.
    const pageErrors = [];
    let failPage;
    const failed = new Promise((_, reject) => { failPage = reject; });
    failed.catch(() => {});
    const onError = (what) => {
      pageErrors.push(what);
      failPage(new Error(`page error: ${what}`));
    };
    page.on('pageerror', (err) => onError(`uncaught: ${err.message}`));
    page.on('console', (msg) => { if (msg.type() === 'error') onError(`console: ${msg.text()}`); });
    const step = (p) => Promise.race([p, failed]);

    const tid = (t) => page.locator(`[data-testid="${t}"]`);

    await step(page.goto(`${base}/ui/`));
    await step(tid('token-input').fill(token));
    await step(tid('token-save').click());

    await step(tid(`approval-${id}`).waitFor());
    if (process.env.MODE === 'spoof') {
      const result = await checkSpoof(page, step, tid, id);
      if (pageErrors.length) throw new Error(`page errors: ${pageErrors.join('; ')}`);
      process.stdout.write(`${JSON.stringify({ ok: true, ...result, ms: Date.now() - started })}\n`);
      return;
    }
    if (scope) {
      const select = tid(`scope-${id}`);
      if (await select.count() === 0) throw new Error(`approval ${id} has no scope select (not egress.host?)`);
      await step(select.selectOption(scope));
    }
    await step(tid(`reason-${id}`).fill(`console test: ${decision}`));
    await step(tid(`${decision}-${id}`).click());

    const decided = tid(`decided-${id}`);
    await step(decided.filter({ hasText: wantState }).waitFor());
    await step(tid(`approval-${id}`).waitFor({ state: 'detached' }));
    await step(page.locator('[data-testid^="audit-"]').filter({ hasText: 'approval.decide' }).first().waitFor());

    const sandboxRows = page.locator('[data-testid^="sandbox-"]');
    await step((expectSandbox ? tid(`sandbox-${expectSandbox}`) : sandboxRows.first()).waitFor());
    await step(page.waitForFunction(() => document.querySelector('[data-testid="live-status"]')?.textContent === 'live'));

    const result = {
      ok: true,
      approval: id,
      decision,
      decided: (await decided.textContent()).trim(),
      sandboxes: await sandboxRows.count(),
      audit_rows: await page.locator('[data-testid^="audit-"]').count(),
      ms: Date.now() - started,
    };
    // Late errors (e.g. from the last render) count too.
    if (pageErrors.length) throw new Error(`page errors: ${pageErrors.join('; ')}`);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await browser.close();
  }
}

// Characters that must never reach the page raw (textsafe.Unsafe's set).
const RAW_UNSAFE = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

async function checkSpoof(page, step, tid, id) {
  const expectApply = env('EXPECT_APPLY');
  const expectNote = env('EXPECT_NOTE');
  const escId = env('ESC_ID');
  const escTail = env('ESC_TAIL');
  const must = (cond, what) => { if (!cond) throw new Error(what); };

  const summary = await step(tid(`summary-${id}`).textContent());
  const fields = await step(tid(`fields-${id}`).textContent());
  const note = await step(tid(`note-${id}`).textContent());
  must(summary.includes(expectApply), `summary ${JSON.stringify(summary)} lacks ${expectApply}`);
  must(!summary.includes(expectNote) && !fields.includes(expectNote), 'the agent\'s words are shown as what will be applied');
  must(fields.includes('host:port') && fields.includes(expectApply), `fields ${JSON.stringify(fields)} lack host:port ${expectApply}`);
  must(note.includes("Agent's note") && note.includes(expectNote), `note ${JSON.stringify(note)}`);
  const apart = await page.evaluate((nid) => {
    const n = document.querySelector(`[data-testid="note-${nid}"]`);
    return n && !n.closest('td.applied') && !!n.closest('td.note-cell');
  }, id);
  must(apart, 'the agent\'s note is not in a cell of its own');

  await step(tid(`approval-${escId}`).waitFor());
  const escRow = await step(tid(`approval-${escId}`).textContent());
  must(!RAW_UNSAFE.test(escRow), `a raw control or bidi character in the row: ${JSON.stringify(escRow)}`);
  // The summary shows \x1b (escaped by the daemon), the argv field its
  // JSON form \u001b; the bidi override is escaped by the console itself.
  must(escRow.includes('\\x1b') && escRow.includes('\\u001b') && escRow.includes('\\u202e'), `escapes not shown: ${JSON.stringify(escRow)}`);
  must(!escRow.includes('\\\\x1b'), 'the summary is escaped twice');
  must(escRow.includes(escTail), 'the long argument was cut');
  const marks = await tid(`approval-${escId}`).locator('.esc').count();
  must(marks >= 1, `${marks} escape marks`); // the override in the argv field, marked by the console

  // Once the audit trail (which holds the same data) is on the page too,
  // nothing raw anywhere.
  await step(page.locator('[data-testid^="audit-"]').filter({ hasText: 'approval.request' }).first().waitFor());
  const all = await page.evaluate(() => document.body.innerText);
  must(!RAW_UNSAFE.test(all.replace(/[\n\t]/g, ' ')), 'a raw control or bidi character on the page');
  return { approval: id, escaped: escId, marks };
}

main().catch((err) => {
  process.stderr.write(`console test failed: ${err.stack || err}\n`);
  process.exit(1);
});
