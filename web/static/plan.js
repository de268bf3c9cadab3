// plan.js — the planner page's "Check it": runs the lab at the plan's shape through the server
// (POST /api/plan/check, what `shardlab plan ... --check --json` prints) and draws what every
// rank logged beside what was planned, category by category, each figure marked equal or
// different.
//
// A check starts processes, so the server wants the token it printed at start-up: post.js
// sends it, as the lab form and the grade button do; without it the button says why.
'use strict';

(function () {
  const form = document.getElementById('plan-check-form');
  const status = document.getElementById('plan-check-status');
  const result = document.getElementById('plan-check-result');
  if (!form || !status || !result) return;
  const NO_TOKEN = 'Checking runs the lab on this machine: open this page from the URL that shardlab web printed ' +
    'when it started (it ends in ?token=...), or run the command above in a terminal.';
  const CATEGORIES = ['params', 'grads', 'optim', 'acts', 'comm'];

  const el = shardlab.el;

  function bytes(v) {
    return v === null || v === undefined ? '-' : Number(v).toLocaleString('en-US');
  }

  // One figure: planned, logged, and the mark (= equal, ≠ different, - no formula).
  function cells(tr, f) {
    tr.append(el('td', bytes(f.planned), 'num'), el('td', bytes(f.logged), 'num'));
    const mark = f.equal === null ? '-' : f.equal ? '= equal' : '\u2260 DIFFERENT';
    tr.append(el('td', mark, f.equal === null ? 'mark' : f.equal ? 'mark eq' : 'mark ne'));
  }

  function draw(c) {
    result.replaceChildren();
    const head = el('p', null, c.ok ? 'check-summary ok' : 'check-summary bad');
    head.textContent = c.status !== 0
      ? 'The run did not finish (exit ' + c.status + '): nothing to compare.'
      : c.equal + ' of ' + c.figures + ' figures equal to the byte on ' + c.device + ' (every rank, every category, after ' +
        'the first step and at the peak)' + (c.ok ? '.' : ': the plan and the lab differ.');
    result.append(head, el('p', c.command, 'check-command'));
    if (c.status !== 0 && c.output) result.append(el('pre', c.output));
    for (const r of c.per_rank || []) {
      result.append(el('h3', 'rank ' + r.rank + (c.lab === 'pp' ? ' (stage ' + r.stage + ')' : '')));
      const table = el('table', null, 'data check');
      const thead = el('thead');
      const top = el('tr');
      top.append(el('th'));
      for (const when of ['after a step', 'at the peak']) {
        const th = el('th', when, 'group');
        th.colSpan = 3;
        top.append(th);
      }
      const sub = el('tr');
      sub.append(el('th', 'bytes'));
      for (let i = 0; i < 2; i++) sub.append(el('th', 'planned', 'num'), el('th', 'measured', 'num'), el('th', ''));
      thead.append(top, sub);
      const tbody = el('tbody');
      for (const k of CATEGORIES) {
        const tr = el('tr');
        tr.append(el('td', k));
        cells(tr, r.after[k]);
        cells(tr, r.peak[k]);
        tbody.append(tr);
      }
      table.append(thead, tbody);
      result.append(table);
    }
  }

  shardlab.post({
    form, status, busy: result, busyText: 'running the lab for a couple of steps\u2026', noToken: NO_TOKEN,
    good: (reply) => Array.isArray(reply.per_rank), draw,
  });
})();
