// run_end.js — a run's dashboard once the run has ended: (5) its summary (summary.json) and
// the checks the lab made on itself (shown as they arrive), and (6) its grade, the lab's
// rubric (GET/POST /api/runs/ID/grade). run.js loads this file and decides when to render.
'use strict';

// run.js hands over what these panels read: S (the state, run_state.js), ui (the page's
// panels), RUN and api (the run's id and its address), three of its helpers, and coll: the
// collectives lab's words (run_collectives.js), or null for a lab that trains. It lends its
// DOM helper as it does to charts.js. kvTable also draws the run's configuration.
window.ShardlabRunEnd = function ({ S, ui, RUN, api, plural, fmtMiB, setText, coll }) {
  const el = window.ShardlabDom.el;

  // ================================================================ (5) summary and checks

  function flatten(obj, prefix, out) {
    for (const [k, v] of Object.entries(obj)) {
      if (v && typeof v === 'object' && !Array.isArray(v)) flatten(v, prefix + k + '.', out);
      else out.push([prefix + k, v]);
    }
    return out;
  }
  // Six significant digits: 0.19999999999999996 is 0.2 to anyone reading a dashboard.
  const num = (v) => (typeof v === 'number' && !Number.isInteger(v) ? +v.toPrecision(6) : v);
  const js = (v) => JSON.stringify(num(v));
  function show(key, v) {
    if (v === null) return 'null';
    if (typeof v === 'number' && /mem|bytes/.test(key) && v >= 1024) return v + ' (' + fmtMiB(v) + ' MiB)';
    return typeof v === 'string' ? v : JSON.stringify(v);
  }
  // A summary's fields in words, with their units (the file's own key is each row's tooltip,
  // to read summary.json against); a field without words reads as its key, spaced.
  const WORDS = {
    lab: ['lab'], status: ['status'], world_size: ['ranks'], steps: ['steps'], first_loss: ['loss at step 1'],
    final_loss: ['loss at the last step'], loss_floor: ['loss floor (the data\u2019s entropy)'],
    tokens: ['tokens trained on'], wall_s: ['wall time', (v) => v.toFixed(v >= 100 ? 0 : 2) + ' s'],
    tokens_per_s: ['tokens per second', (v) => Math.round(v).toLocaleString('en-US')],
    param_hash: ['parameters\u2019 hash (bitwise identity)'], mem_peak: ['peak memory per rank'],
    run_dir: ['run directory'], psi_padded: ['parameters, padded to N equal shards']
  };
  // pairs: [key, value] (words: the lab's own, before these), or [key, text, label] already in words.
  function kvTable(pairs, caption, words) {
    const row = ([k, v, said]) => {
      const w = (words && words[k]) || WORDS[k], label = said || (w ? w[0] : k.replace(/_/g, ' ').replace(/\./g, ': '));
      const own = words && words[k], f = w && w[1];
      const text = said ? String(v) : f && v !== null && (typeof v === 'number' || own) ? f(v) : show(k, v);
      return el('tr', null, el('th', { scope: 'row', text: label, title: k }), el('td', { text }));
    };
    // Rows already in words read as prose, not as a file's values.
    const prose = pairs.length && pairs.every((p) => p.length > 2);
    return el('table', { class: prose ? 'kv prose' : 'kv' }, el('caption', { class: 'sr-only', text: caption }), el('tbody', null, ...pairs.map(row)));
  }

  // pp's schedule as the terminal prints it, a row per stage and a column per unit of time
  // (forward 1, backward 2): forwards light, backwards dark, the idle time (the bubble) shaded.
  function schedule(sum) {
    const cells = (row) => Array.from(row).map((ch) => {
      const kind = ch === '.' ? 'idle' : ch >= 'a' && ch <= 'z' ? 'fwd' : 'bwd';
      const mb = kind === 'idle' ? null : (ch.toLowerCase().charCodeAt(0) - 97);
      return el('span', { class: 'sched-' + kind, title: kind === 'idle' ? 'idle' : (kind === 'fwd' ? 'forward' : 'backward') +
        ' of micro-batch ' + mb, text: ch === '.' ? '\u00a0' : ch });
    });
    const rows = sum.timeline.map((row, s) => el('div', { class: 'sched-row' }, el('span', { class: 'sched-stage', text: 'stage ' + s }), ...cells(row)));
    const b = sum.bubble || {};
    return el('div', { class: 'schedule', role: 'img', 'aria-label': 'pipeline schedule, ' + sum.timeline.join(' | ') },
      el('h3', { text: 'The ' + (sum.schedule || '') + ' schedule' }),
      ...rows,
      el('p', { class: 'note', text: 'One column per unit of time (forward 1, backward 2); a b c \u2026 forward, A B C \u2026 backward of ' +
        'micro-batch 0 1 2 \u2026; shaded: idle, the bubble' + (typeof b.formula === 'number' ? ': ' + (100 * b.formula).toFixed(1) +
        '% of the step by the formula, ' + (100 * b.measured).toFixed(1) + '% measured' : '') + (sum.timeline_cut ? ' (its first 600 columns)' : '') + '.' }));
  }

  function renderSummary() {
    if (!S.final) return;
    const sum = S.info && S.info.summary;
    ui.summary.s.hidden = false;
    if (!sum) {
      ui.summary.n.textContent = 'the run ended without a summary.json (rank 0 writes it last; a run that failed early has none)';
      return;
    }
    if (ui.summary.done) return;
    ui.summary.done = true;
    // The collectives lab: what it ran and found, in words (its table is the figure's).
    if (coll) {
      ui.summary.n.textContent = 'what the lab ran and found (summary.json, written by rank 0 at the end; hover a row for its key)';
      ui.summary.s.append(kvTable(coll.summaryPairs(sum, S.info.meta && S.info.meta.config), 'summary of run ' + RUN));
      return;
    }
    ui.summary.n.textContent = 'summary.json, written by rank 0 at the end';
    // Scalars (and small objects, flattened) in one table; a list of records as a table of
    // its own, folded when long.
    const pairs = [], lists = [];
    for (const [k, v] of Object.entries(sum)) {
      if (k === 'timeline' || k === 'timeline_cut') continue;  // pp's schedule: drawn below
      if (Array.isArray(v) && v.length && v.every((x) => x && typeof x === 'object' && !Array.isArray(x))) lists.push([k, v]);
      else flatten({ [k]: v }, '', pairs);
    }
    ui.summary.s.append(kvTable(pairs, 'summary of run ' + RUN));
    // A finished training run is a reference for the next: its loss drawn beside theirs.
    if (S.status === 'ok' && S.lab && S.lab !== 'collectives') {
      ui.summary.s.append(el('p', null, el('a', { class: 'button', id: 'compare', href: '/labs/' + encodeURIComponent(S.lab) + '?ref=' +
        encodeURIComponent(RUN), text: 'Start a run compared with this one' }),
        ' (its dashboard draws this run\u2019s loss as the reference; every lab\u2019s form offers it under --ref)'));
    }
    if (Array.isArray(sum.timeline) && sum.timeline.every((r) => typeof r === 'string')) ui.summary.s.append(schedule(sum));
    for (const [k, rows] of lists) {
      const cols = Array.from(new Set(rows.flatMap((r) => Object.keys(r))));
      const table = el('table', { class: 'data' },
        el('thead', null, el('tr', null, ...cols.map((c) => el('th', { text: c })))),
        el('tbody', null, ...rows.map((r) => el('tr', null, ...cols.map((c) => el('td', { text: r[c] === undefined ? '' : show(c, r[c]) }))))));
      ui.summary.s.append(rows.length > 12
        ? el('details', { class: 'data' }, el('summary', { text: k + ': ' + plural(rows.length, 'row') }), table)
        : el('div', null, el('h3', { text: k }), table));
    }
  }

  // The lab's checks in words: what each one compares (its name stays as the jsonl spells it).
  // A name not listed here says what it is already (pp's, the ckpt table's, collectives' rows).
  const CHECK_WORDS = {
    'mem.ddp_total': 'the memory table\u2019s \u201cDDP holds\u201d column adds up to what the ddp lab itself holds per '
      + 'rank at the same N and --accum (the \u201cDDP: X per rank\u201d line under the table)',
    'comm.grad_bytes_sent': 'step 1\u2019s gradient all-reduces sent the algorithm\u2019s count of bytes',
    'comm.unit_bytes_sent': 'step 1\u2019s all-gathers and reduce-scatters of the units sent the formula\u2019s bytes',
    'comm.tp_collectives': 'step 1\u2019s f, g and head collectives: as many of each kind as the formula says',
    'comm.tp_bytes_sent': 'step 1\u2019s f, g and head collectives sent the formula\u2019s bytes',
    'acts.peak_in_step_1': 'the most activation memory step 1 held at once: the policy\u2019s formula plus the pass\u2019s workspace',
    'data.held': 'the bytes of the dataset this rank holds, against the strategy\u2019s formula',
    'data.bytes_moved': 'the bytes of data this rank sent and received, against the strategy\u2019s formulas',
    'data.table': 'every rank\u2019s figures in the data table equal the formulas',
    'resume.step': 'the step the run resumed from its checkpoint'
  };
  function checkWords(name) {
    const row = /^mem\.(params|grads|optim|acts|comm|host)$/.exec(name);
    return row ? 'the memory table\u2019s ' + row[1] + ' row: the bytes this rank holds, against its formula' : CHECK_WORDS[name] || '';
  }

  function renderChecks() {
    if (!S.checks.size) return;
    ui.checks.s.hidden = false;
    let bad = 0;
    const items = [];
    for (const [name, list] of S.checks) {
      const failed = list.filter((c) => !c.ok);
      bad += failed.length;
      const li = el('li', { class: failed.length ? 'bad' : 'ok', title: name }, el('span', { class: 'mark', text: failed.length ? 'FAILED' : 'ok' }),
        coll ? coll.checkLabel(name) : name);
      const val = (v) => (coll ? coll.checkValue(name, v) : js(v));
      const words = coll ? null : checkWords(name);
      if (words) li.append(el('span', { class: 'what', text: ': ' + words }));
      if (failed.length) {
        li.append(' \u2014 ' + failed.map((c) => 'rank ' + c.rank + ': ' + val(c.value) + ', expected ' + val(c.expect)).join('; '));
      } else {
        const c = list[0];
        li.append(el('span', { class: 'muted', text: ' (' + plural(new Set(list.map((x) => x.rank)).size, 'rank') + (c.value !== undefined ? '; ' + val(c.value) : '') + ')' }));
      }
      items.push(li);
    }
    ui.checks.n.textContent = bad ? bad + ' failed' : 'all passed';
    ui.checks.s.querySelectorAll('ul, details').forEach((u) => u.remove());
    // Failures always show; a long list of passes folds away, so they do not bury them.
    const fails = items.filter((li) => li.classList.contains('bad')), passes = items.filter((li) => !li.classList.contains('bad'));
    if (fails.length) ui.checks.s.append(el('ul', { class: 'checks' }, ...fails));
    if (passes.length > 12) {
      ui.checks.s.append(el('details', { class: 'data' }, el('summary', { text: plural(passes.length, 'check') + ' passed' }),
        el('ul', { class: 'checks' }, ...passes)));
    } else if (passes.length) {
      ui.checks.s.append(el('ul', { class: 'checks' }, ...passes));
    }
  }

  // ================================================================ (6) the grade

  // Once the run has ended: its grade.json when it has one, else a button that grades it.
  // Grading runs `shardlab grade` in the server, which may first start a single-rank reference
  // run: seconds, during which the button waits and says so. It starts processes, so the
  // server wants the token the page was given (as the lab form does); the command stays in a
  // note for the terminal.
  const tokenMeta = document.querySelector('meta[name="shardlab-token"]');
  const TOKEN = tokenMeta ? tokenMeta.content : '';
  const NO_TOKEN = 'This page cannot grade: open it with the URL that shardlab web printed when it started ' +
    '(it ends in ?token=...), or grade in a terminal.';
  const G = { state: 'idle' };  // idle, loading, none, grading, graded

  function gradeSay(text, isError, done) {
    G.status.textContent = text;
    G.status.classList.toggle('error', !!isError);
    G.status.classList.toggle('done', !!done);
  }

  function gradeButton(label, secondary) {
    const b = el('button', { type: 'button', class: secondary ? 'secondary' : null, text: label });
    b.addEventListener('click', gradeNow);
    return b;
  }

  async function gradeNow(e) {
    const button = e.currentTarget;
    if (!TOKEN) { gradeSay(NO_TOKEN, true); return; }
    button.disabled = true;
    G.state = 'grading';
    ui.grade.s.setAttribute('aria-busy', 'true');
    gradeSay(coll ? coll.grading : 'grading\u2026 the grader reads the logs and may start a single-rank reference run; this takes a few seconds', false);
    let res = null, reply = null;
    try {
      res = await fetch(api + '/grade', {
        method: 'POST',
        headers: { 'X-Shardlab-Token': TOKEN, Accept: 'application/json' },
      });
      try { reply = await res.json(); } catch (_) { /* the status code says enough */ }
    } catch (err) {
      reply = { error: 'could not reach the server (' + err.message + '); is shardlab web still running?' };
    }
    ui.grade.s.removeAttribute('aria-busy');
    button.disabled = false;
    if (res && res.ok && reply) {
      showGrade(reply, true);
      return;
    }
    G.state = G.table ? 'graded' : 'none';
    gradeSay((reply && reply.error) || 'the server answered HTTP ' + (res ? res.status : '?'), true);
  }

  function showGrade(g, fresh) {
    if (!g || !Array.isArray(g.checks)) {
      G.state = 'none';
      G.body.replaceChildren(gradeButton('Grade this run'));
      gradeSay('grade.json is not one run\u2019s grade (it has no list of checks): grade the run again', true);
      return;
    }
    G.state = 'graded';
    const failed = g.checks.filter((c) => c.result === 'FAIL').length;
    const total = g.points + '/' + g.max;
    const verdict = failed ? plural(failed, 'check') + ' failed' : 'every check passed';
    // The reason column only when a check failed or was skipped; it is what a student reads.
    const why = g.checks.some((c) => c.reason);
    const head = ['Check', 'Result', 'Points', 'Measured', 'Expected'].concat(why ? ['Why'] : []);
    const rows = g.checks.map((c) => {
      const res = ['PASS', 'FAIL', 'SKIP'].includes(c.result) ? c.result : String(c.result);
      return el('tr', { class: 'res-' + res.toLowerCase() },
        el('th', { scope: 'row' }, el('code', { text: c.name }), el('span', { class: 'what', text: c.what || '' })),
        el('td', { class: 'res', text: res }),
        el('td', { class: 'num', text: res === 'SKIP' ? '\u2013' : c.points + '/' + c.max }),
        el('td', { class: 'val', text: c.measured || '' }),
        el('td', { class: 'val', text: c.expected || '' }),
        ...(why ? [el('td', { class: 'why', text: res === 'PASS' ? '' : c.reason || '' })] : []));
    });
    G.table = el('table', { class: 'data rubric' },
      el('caption', null, 'Total ', el('strong', { class: 'grade-total', text: total }), ' points \u00b7 ' + verdict),
      el('thead', null, el('tr', null, ...head.map((h) => el('th', { scope: 'col', class: h === 'Points' ? 'num' : null, text: h })))),
      el('tbody', null, ...rows));
    G.body.replaceChildren(el('div', { class: 'rubric-box' }, G.table),
      el('p', { class: 'grade-actions' }, gradeButton('Grade again', true)));
    ui.grade.n.textContent = 'rubric of ' + (g.label || g.lab || 'the lab') + ': each check PASS or FAIL, measured against expected, '
      + 'from grade.json in the run\u2019s directory';
    gradeSay(fresh ? 'graded: ' + total + ' points, ' + verdict : '', false, true);
  }

  function offerGrading() {
    G.state = 'none';
    G.body.replaceChildren(gradeButton('Grade this run'));
    gradeSay(TOKEN ? '' : NO_TOKEN, false);
  }

  async function loadGrade() {
    // The run's description says whether it has a grade.json: asking for one it does not
    // have would be a 404, which browsers log as an error.
    if (!(S.info && S.info.graded)) { offerGrading(); return; }
    G.state = 'loading';
    gradeSay('looking for a grade\u2026', false);
    let res = null, reply = null;
    try {
      res = await fetch(api + '/grade', { headers: { Accept: 'application/json' } });
      try { reply = await res.json(); } catch (_) { /* below */ }
    } catch (_) { /* below: offer to grade */ }
    if (res && res.ok) { showGrade(reply, false); return; }
    offerGrading();
    if (!(res && res.status === 404)) gradeSay((reply && reply.error) || 'could not read the grade', true);
  }

  function renderGrade() {
    if (!S.final || !S.streamDone) return;  // (what the run is needs all of its events)
    // A run that stopped before it started (every event read, none a start event: its lab
    // refused the options) has nothing to grade; the errors above say why.
    if (S.streamDone && !S.started) {
      if (G.state === 'idle') {
        G.state = 'none';
        ui.grade.s.append(el('p', { class: 'note' }, 'This run stopped before it started: there is nothing to grade.'));
        ui.grade.s.hidden = false;
      }
      return;
    }
    if (G.state === 'idle') {
      ui.grade.n.textContent = coll ? coll.gradeNote : 'the lab\u2019s invariants checked on this run\u2019s logs, against a ' +
        'single-rank reference run on the same global batch and the method\u2019s formulas';
      G.body = el('div', { class: 'grade-body' });
      G.status = el('p', { class: 'grade-status', role: 'status' });
      G.cmd = el('code');
      ui.grade.s.append(G.body, G.status, el('p', { class: 'note grade-cmd' }, 'In a terminal: ', G.cmd));
      ui.grade.s.hidden = false;
      loadGrade();
    }
    // The summary (and so the run's directory as the launcher wrote it) may arrive later.
    const sum = S.info && S.info.summary;
    if (G.cmd) setText(G.cmd, 'shardlab grade ' + ((sum && sum.run_dir) || 'runs/' + RUN));
  }

  return { renderSummary, renderChecks, renderGrade, kvTable };
};
