// checks.js — a lab page's "Your TODO regions": "Check them" runs make check's programs on the
// lab's regions through the server (POST /api/checks?lab=L, what `check --json` prints) and
// draws a row per region: its status (passed, FAILED, not written yet, does not build), the
// region, its file and its points; under a failure, what the check said and what to reread;
// then the totals and the next command, as `make check` prints them in a terminal.
//
// Checking runs the student's code, so the server wants the token it printed at start-up:
// post.js sends it, as the lab form does; without it the button says why.
'use strict';

(function () {
  const form = document.getElementById('checks-form');
  const status = document.getElementById('checks-status');
  const table = document.getElementById('checks-table');
  const next = document.getElementById('checks-next');
  if (!form || !status || !table || !next) return;
  const NO_TOKEN = 'Checking runs your code on this machine: open this page from the URL that shardlab web printed ' +
    'when it started (it ends in ?token=...), or run make check in a terminal.';
  // The word a status is shown as (the terminal's), and its class (its colour repeats the word).
  const WORDS = { passed: 'passed', failed: 'FAILED', 'not written yet': 'not written yet', 'does not build': 'does not build' };

  const el = shardlab.el;

  function row(r) {
    const tr = el('tr');
    tr.dataset.region = r.name;
    tr.dataset.status = r.status;
    const word = WORDS[r.status] || r.status;
    tr.append(el('td', word, 'st st-' + String(r.status).replace(/ /g, '-')));
    const name = el('td');
    name.append(el('code', r.name), el('br'), el('small', r.what));
    // Not written yet: where the stub is (the message ends with its file and line).
    if (r.status === 'not written yet' && r.message) {
      const at = r.message.match(/\(([^()]*:\d+)\)$/);
      name.append(el('br'), el('small', at ? 'the TODO is at ' + at[1] : r.message, 'where'));
    }
    const file = el('td');
    file.append(el('code', r.file));
    const configs = (r.configurations || []).length;
    const points = el('td', String(r.points), 'num');
    points.title = 'the graded configurations that run it: ' + (r.configurations || []).join(', ');
    points.append(el('br'), el('small', configs + (configs === 1 ? ' configuration' : ' configurations')));
    tr.append(name, file, points);
    if (r.status !== 'failed' && r.status !== 'does not build') return [tr];
    // A failure: the check's message whole (which rank, chunk, round; expected against got),
    // or the compiler's errors; then what to reread.
    tr.className = 'has-detail';
    const detail = el('tr', null, 'detail');
    const td = el('td');
    td.colSpan = 4;
    td.append(el('pre', r.message || '(no message)', 'check-message'));
    if (r.status === 'failed') td.append(el('p', 'reread: ' + r.reread, 'reread'));
    detail.append(td);
    return [tr, detail];
  }

  function draw(c) {
    const tbody = el('tbody');
    for (const r of c.regions) tbody.append(...row(r));
    table.replaceChild(tbody, table.tBodies[0]);
    let totals = c.passed + ' passed, ' + c.failed + ' failed, ' + c.not_written + ' not written yet';
    if (c.does_not_build) totals += ' (' + c.does_not_build + ' do not build)';
    next.replaceChildren(el('span', totals, 'totals'), el('br'), el('span', 'next: ', 'next-word'), el('code', c.next));
  }

  shardlab.post({
    form, status, busy: table, busyText: 'checking each region alone\u2026', noToken: NO_TOKEN,
    good: (reply) => Array.isArray(reply.regions), draw,
  });
})();
