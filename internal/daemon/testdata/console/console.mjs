// Drives the web console in headless Chromium: sign in with the operator
// token, decide one pending approval, and check the page shows the
// decision, its audit record and the live sandboxes. Any error in the page
// (an exception, a console error, a CSP violation) fails the run.
//
// env: IRONCLAW_URL, IRONCLAW_OPERATOR_TOKEN, APPROVAL_ID (required);
//      DECISION=approve|deny, SCOPE=sandbox|global, EXPECT_SANDBOX=sbx-...,
//      CHROMIUM (default /usr/bin/chromium).
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

main().catch((err) => {
  process.stderr.write(`console test failed: ${err.stack || err}\n`);
  process.exit(1);
});
