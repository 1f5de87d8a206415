// IronClaw web console. Plain DOM, no framework: every value from the API is
// put on the page as text, never parsed as HTML, and through safe(), which
// shows control, bidirectional and other invisible characters as visible
// escapes (\x1b, \u202e), as the CLI does: an agent's text cannot repaint
// or reorder what the operator reads.
'use strict';

const TOKEN_KEY = 'ironclaw.operator-token';
const AUDIT_KEEP = 200;
const DECIDED_KEEP = 50;
const BACKOFF_MS = [1000, 2000, 5000];

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Everything tied to one signed-in token. A new session (or sign-out)
// replaces it, so loops and callbacks of an old one see they are stale.
let run = null;

class AuthError extends Error {}
class ApiError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
  }
}

// api fetches path with the token. 401/403 end the session, since no other
// call with this token can succeed either; other failures are thrown.
async function api(r, path, init = {}) {
  const headers = { Authorization: `Bearer ${r.token}` };
  if (init.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { ...init, headers, signal: init.signal || r.abort.signal, cache: 'no-store' });
  if (res.status === 401 || res.status === 403) {
    if (r === run) signOut(res.status === 401
      ? 'The daemon rejected this token (401). Paste the operator token.'
      : 'This token may not do that (403): it is not the operator token.');
    throw new AuthError('signed out');
  }
  if (!res.ok) {
    let code = 'error';
    let message = res.statusText;
    try {
      const body = await res.json();
      code = body.error.code;
      message = body.error.message;
    } catch { /* not the contract's JSON: keep the status text */ }
    throw new ApiError(res.status, code, message);
  }
  return res;
}

// stream reads an NDJSON response line by line until it ends.
async function stream(r, path, onObject, onOpen) {
  const res = await api(r, path);
  onOpen();
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onObject(JSON.parse(line));
    }
  }
}

// keepStreaming reopens a stream whenever it ends or fails, backing off
// while it keeps failing; open gets a callback to call once connected.
async function keepStreaming(r, name, open) {
  let failures = 0;
  while (r === run) {
    try {
      await open(() => { failures = 0; setLive(r, name, true); });
    } catch (e) {
      if (e instanceof AuthError || r !== run) return;
      // Network errors and bad lines just mean "reconnect"; the status pill says so.
    }
    if (r !== run) return;
    setLive(r, name, false);
    await sleep(BACKOFF_MS[Math.min(failures++, BACKOFF_MS.length - 1)]);
  }
}

function setLive(r, name, up) {
  r.live[name] = up;
  const pill = $('live');
  const all = Object.values(r.live).every(Boolean);
  r.wasLive ||= up;
  pill.textContent = all ? 'live' : r.wasLive ? 'reconnecting' : 'connecting';
  pill.className = `status ${all ? 'on' : 'retry'}`;
}

// --- small DOM helpers ---

// Characters that must not reach the page raw (as textsafe.Unsafe): C0 and
// C1 controls, DEL, line and paragraph separators, format characters (the
// bidi embeddings, overrides, isolates and marks among them), lone
// surrogates; and the backslash, doubled so an escape cannot be faked.
const UNSAFE = /[\p{Cc}\p{Cf}\u2028\u2029\ufffd\\]|[\ud800-\udfff]/gu;

function escapeChar(ch) {
  if (ch === '\\') return '\\\\';
  if (ch === '\n') return '\\n';
  if (ch === '\t') return '\\t';
  if (ch === '\r') return '\\r';
  const cp = ch.codePointAt(0);
  if (cp < 0x80) return `\\x${cp.toString(16).padStart(2, '0')}`;
  if (cp <= 0xffff) return `\\u${cp.toString(16).padStart(4, '0')}`;
  return `\\U${cp.toString(16).padStart(8, '0')}`;
}

// safe renders text as nodes: the text itself, with every unsafe character
// replaced by its escape, marked so it stands out.
function safe(value) {
  const text = String(value ?? '');
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(UNSAFE)) {
    if (m.index > last) frag.append(text.slice(last, m.index));
    if (m[0] === '\\') {
      frag.append('\\\\');
    } else {
      const mark = document.createElement('span');
      mark.className = 'esc';
      mark.title = 'an escaped control or format character';
      mark.textContent = escapeChar(m[0]);
      frag.append(mark);
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) frag.append(text.slice(last));
  return frag;
}

// el builds an element; string children go through safe().
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'testid') node.dataset.testid = v;
    else if (k === 'class') node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c instanceof Node) node.append(c);
    else {
      const s = String(c ?? '');
      // Plain strings with nothing unsafe stay one text node.
      node.append(s.search(UNSAFE) < 0 ? s : safe(s));
    }
  }
  return node;
}

function td(text, cls = '') {
  return el('td', cls ? { class: cls } : {}, text ?? '');
}

// compact is a value as JSON, shortened: for the audit trail only; the
// approvals show their fields in full.
function compact(value) {
  if (value === undefined || value === null) return '';
  const s = JSON.stringify(value);
  return s.length > 300 ? `${s.slice(0, 300)}…` : s;
}

// jsonSafe shows JSON text (a field with format "json"): characters that
// must be escaped become JSON \u escapes, marked, so it stays valid and
// exact JSON; its own backslashes are JSON's and stay as they are.
function jsonSafe(value) {
  const text = String(value ?? '');
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(/[\p{Cc}\p{Cf}\u2028\u2029\ufffd]|[\ud800-\udfff]/gu)) {
    if (m.index > last) frag.append(text.slice(last, m.index));
    const mark = document.createElement('span');
    mark.className = 'esc';
    mark.title = 'an escaped control or format character';
    let esc = '';
    for (let i = 0; i < m[0].length; i++) esc += `\\u${m[0].charCodeAt(i).toString(16).padStart(4, '0')}`;
    mark.textContent = esc;
    frag.append(mark);
    last = m.index + m[0].length;
  }
  if (last < text.length) frag.append(text.slice(last));
  return frag;
}

// summaryText shows a summary: the daemon escapes its values already, so
// its backslashes are not doubled again (anything unsafe still is).
function summaryText(s) {
  const text = String(s ?? '');
  return /^[^\p{Cc}\p{Cf}\u2028\u2029\ufffd\ud800-\udfff]*$/u.test(text) ? document.createTextNode(text) : safe(text);
}

// applied is what an approval will do: the daemon's summary, derived from
// the data it applies, and every decisive field in full.
function applied(a) {
  const list = el('dl', { class: 'fields', testid: `fields-${a.id}` });
  for (const f of a.fields || []) {
    list.append(el('dt', {}, f.name), el('dd', {}, f.format === 'json' ? jsonSafe(f.value) : f.value));
  }
  return el('td', { class: 'applied' }, el('div', { class: 'summary', testid: `summary-${a.id}` }, summaryText(a.summary)), list);
}

// agentNote is the requester's own text, labelled and set apart.
function agentNote(a) {
  const cell = el('td', { class: 'note-cell' });
  if (a.agent_note) {
    cell.append(el('div', { class: 'agent-note', testid: `note-${a.id}` },
      el('span', { class: 'note-label' }, "Agent's note (its own words, not checked):"), ' ',
      el('q', {}, a.agent_note)));
  }
  return cell;
}

function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

function countdown(iso) {
  const ms = new Date(iso) - Date.now();
  if (!(ms > 0)) return 'expiring';
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

// --- approvals ---

function upsertApproval(r, a) {
  if (!a || !a.id) return;
  r.stale.delete(a.id);
  if (a.state === 'pending') {
    r.pending.set(a.id, a);
    if (!r.rows.has(a.id)) addApprovalRow(r, a);
    else r.rows.get(a.id).querySelector('.countdown').dataset.expires = a.expires_at || '';
  } else {
    r.pending.delete(a.id);
    r.rows.get(a.id)?.remove();
    r.rows.delete(a.id);
    addDecided(a);
  }
  $('no-approvals').hidden = r.pending.size > 0;
}

function addApprovalRow(r, a) {
  const id = a.id;
  const scope = el('select', { testid: `scope-${id}`, 'aria-label': 'scope' },
    el('option', { value: 'sandbox' }, 'sandbox'), el('option', { value: 'global' }, 'global'));
  const reason = el('input', { testid: `reason-${id}`, placeholder: 'reason (optional)', 'aria-label': 'reason' });
  const approve = el('button', { type: 'button', class: 'approve', testid: `approve-${id}` }, 'Approve');
  const deny = el('button', { type: 'button', class: 'deny', testid: `deny-${id}` }, 'Deny');
  const msg = el('div', { class: 'error', role: 'alert' });
  const expires = td(countdown(a.expires_at), 'countdown');
  expires.dataset.expires = a.expires_at || '';
  const actions = el('td', { class: 'actions' });
  if (a.kind === 'egress.host') actions.append(scope, ' ');
  actions.append(reason, ' ', approve, ' ', deny, msg);

  const by = a.via ? `${a.requested_by} (via ${a.via})` : a.requested_by;
  const row = el('tr', { testid: `approval-${id}` },
    td(id, 'mono'), td(a.kind), td(a.session, 'mono'), td(by, 'mono'),
    applied(a), agentNote(a), td(when(a.created_at)), expires, actions);

  const decide = async (verb) => {
    const body = {};
    if (verb === 'approve' && a.kind === 'egress.host') body.scope = scope.value;
    if (reason.value.trim()) body.reason = reason.value.trim();
    approve.disabled = deny.disabled = true;
    msg.textContent = '';
    try {
      const res = await api(r, `/v1/approvals/${encodeURIComponent(id)}/${verb}`,
        { method: 'POST', body: JSON.stringify(body) });
      upsertApproval(r, await res.json());
    } catch (e) {
      if (e instanceof AuthError) return;
      msg.textContent = `Could not ${verb}: ${e.message}`;
      approve.disabled = deny.disabled = false;
      // A 409 usually means it was decided elsewhere or expired: show the truth.
      if (e.status === 409 || e.status === 404) refreshApproval(r, id);
    }
  };
  approve.addEventListener('click', () => decide('approve'));
  deny.addEventListener('click', () => decide('deny'));

  // Newest first, without moving existing rows (that would drop focus).
  // (Compared as dates: RFC 3339 strings with fractions do not sort as text.)
  const created = (x) => Date.parse(x?.created_at) || 0;
  const before = [...$('approvals').children].find((other) => created(r.pending.get(other.dataset.id)) < created(a));
  row.dataset.id = id;
  $('approvals').insertBefore(row, before || null);
  r.rows.set(id, row);
}

async function refreshApproval(r, id) {
  try {
    const res = await api(r, `/v1/approvals/${encodeURIComponent(id)}`);
    upsertApproval(r, await res.json());
  } catch (e) {
    if (e.status === 404 && r.pending.has(id)) upsertApproval(r, { ...r.pending.get(id), state: 'gone' });
  }
}

function addDecided(a) {
  const list = $('decided');
  list.querySelector(`[data-testid="decided-${CSS.escape(a.id)}"]`)?.remove();
  const parts = [`${a.kind || ''} ${a.id}`];
  if (a.summary) parts.push(summaryText(a.summary));
  if (a.agent_note) parts.push(`agent's note: “${a.agent_note}”`);
  if (a.session) parts.push(`session ${a.session}`);
  if (a.decided_by) parts.push(`by ${a.decided_by}`);
  if (a.scope) parts.push(`scope ${a.scope}`);
  if (a.reason) parts.push(`reason: ${a.reason}`);
  if (a.result) parts.push(`result ${compact(a.result)}`);
  if (a.decided_at) parts.push(when(a.decided_at));
  const joined = parts.flatMap((p, i) => (i ? [' · ', p] : [p]));
  list.prepend(el('li', { testid: `decided-${a.id}` },
    el('strong', { class: `state-${a.state}` }, a.state), ' ', ...joined));
  while (list.children.length > DECIDED_KEEP) list.lastElementChild.remove();
  $('no-decided').hidden = true;
}

function watchApprovals(r) {
  return keepStreaming(r, 'approvals', (onOpen) => stream(r, '/v1/approvals?watch=1', (a) => upsertApproval(r, a), () => {
    // The stream replays every pending approval first. Any we show as pending
    // that it does not replay soon was decided while we were away: ask.
    r.stale = new Set(r.pending.keys());
    setTimeout(() => {
      if (r !== run) return;
      for (const id of r.stale) refreshApproval(r, id);
    }, 3000);
    onOpen();
  }));
}

// --- sandboxes ---

async function loadSandboxes(r) {
  try {
    const res = await api(r, '/v1/sandboxes');
    const { sandboxes = [] } = await res.json();
    if (r !== run) return;
    $('sandboxes').replaceChildren(...sandboxes.map((s) => el('tr', { testid: `sandbox-${s.id}` },
      td(s.id, 'mono'), td(s.state),
      td(Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(', '), 'mono'),
      td(when(s.created_at)), td(when(s.expires_at)), td(s.idle_timeout), td(when(s.last_used_at)))));
    $('sandboxes-msg').textContent = '';
  } catch (e) {
    if (!(e instanceof AuthError) && r === run) $('sandboxes-msg').textContent = `Could not list sandboxes: ${e.message}`;
  }
}

// Bursts of sandbox events (create, exec, exec, ...) cost one listing.
function sandboxesSoon(r) {
  clearTimeout(r.sandboxTimer);
  r.sandboxTimer = setTimeout(() => { if (r === run) loadSandboxes(r); }, 500);
}

// --- audit ---

function addAudit(r, rec) {
  if (rec.seq <= r.lastSeq) return; // a reconnect may overlap
  r.lastSeq = rec.seq;
  const body = $('audit');
  body.prepend(el('tr', { testid: `audit-${rec.seq}` },
    td(rec.seq, 'mono'), td(when(rec.time)), td(rec.actor), td(rec.kind, 'mono'),
    td(rec.session, 'mono'), td(compact(rec.data), 'mono data')));
  while (body.children.length > AUDIT_KEEP) body.lastElementChild.remove();
  if (/^(sandbox|agent)\./.test(rec.kind || '')) sandboxesSoon(r);
}

async function loadAudit(r) {
  // Page from the start, remembering only the tail we show.
  const limit = 1000;
  let after = 0;
  let tail = [];
  for (;;) {
    const res = await api(r, `/v1/audit?after=${after}&limit=${limit}`);
    const { records = [] } = await res.json();
    if (records.length) after = records[records.length - 1].seq;
    tail = tail.concat(records).slice(-AUDIT_KEEP);
    if (records.length < limit) break;
  }
  for (const rec of tail) addAudit(r, rec);
}

function followAudit(r) {
  return keepStreaming(r, 'audit', async (onOpen) => {
    if (!r.auditLoaded) {
      await loadAudit(r);
      r.auditLoaded = true;
    }
    await stream(r, `/v1/audit?after=${r.lastSeq}&follow=1`, (rec) => addAudit(r, rec), onOpen);
  });
}

// --- session ---

function start(token) {
  run = {
    token, abort: new AbortController(), live: { approvals: false, audit: false },
    pending: new Map(), rows: new Map(), stale: new Set(),
    lastSeq: 0, auditLoaded: false, timers: [],
  };
  const r = run;
  $('login').hidden = true;
  $('app').hidden = false;
  $('forget').hidden = false;
  $('login-msg').textContent = '';
  for (const id of ['approvals', 'decided', 'sandboxes', 'audit']) $(id).replaceChildren();
  $('no-approvals').hidden = false;
  $('no-decided').hidden = false;
  setLive(r, 'audit', false);
  watchApprovals(r);
  followAudit(r);
  loadSandboxes(r);
  r.timers.push(setInterval(() => loadSandboxes(r), 10000));
  r.timers.push(setInterval(() => {
    for (const cell of document.querySelectorAll('td.countdown')) {
      cell.textContent = countdown(cell.dataset.expires);
      cell.classList.toggle('soon', new Date(cell.dataset.expires) - Date.now() < 60000);
    }
  }, 1000));
}

function signOut(message = '') {
  if (run) {
    run.abort.abort();
    run.timers.forEach(clearInterval);
    clearTimeout(run.sandboxTimer);
    run = null;
  }
  sessionStorage.removeItem(TOKEN_KEY);
  $('app').hidden = true;
  $('forget').hidden = true;
  $('login').hidden = false;
  $('login-msg').textContent = message;
  const live = $('live');
  live.textContent = 'offline';
  live.className = 'status off';
  $('token').focus();
}

function save() {
  const token = $('token').value.trim();
  if (!token) {
    $('login-msg').textContent = 'Paste a token first.';
    return;
  }
  $('token').value = ''; // keep it out of the DOM once stored
  sessionStorage.setItem(TOKEN_KEY, token);
  start(token);
}

$('save').addEventListener('click', save);
$('token').addEventListener('keydown', (e) => { if (e.key === 'Enter') save(); });
$('forget').addEventListener('click', () => signOut('Token forgotten.'));

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) start(saved);
else $('token').focus();
