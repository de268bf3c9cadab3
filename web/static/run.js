// run.js — a run's dashboard, live while the run trains and the same afterwards (replay).
//
// The server gives the run's description (GET /api/runs/ID) and then its events, all of them
// from the first, as one Server-Sent Events stream; this script keeps the little state the
// panels need (rank 0's loss, each rank's latest step, the spans of the steps the timeline
// may show) and redraws at most five times a second, so a fast run or the replay of a long
// one streams tens of thousands of events without freezing the page.
//
// Panels: status line; (1) loss of rank 0 with the loss floor and a reference run; (2) step
// time per rank, compute and communication; (3) memory per rank by category; (4) the timeline
// of the last complete step; (5) at the end, summary and checks; (6) the grade: the lab's
// rubric (GET/POST /api/runs/ID/grade). This file decides what they show; charts.js (loaded
// from here) draws them.
'use strict';

(function () {
  const main = document.getElementById('run');
  const root = document.getElementById('dashboard');
  if (!main || !root) return;
  const RUN = main.dataset.run;
  const api = '/api/runs/' + encodeURIComponent(RUN);
  const REDRAW_MS = 200;  // at most five redraws a second
  const MiB = 1048576;

  // ================================================================ small helpers

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  }
  window.ShardlabDom = { el };  // charts.js draws with the same helper

  const fmtMiB = (b) => { const m = b / MiB; return m.toFixed(m >= 100 ? 0 : m >= 10 ? 1 : 2); };
  const fmtMs = (ms) => ms.toFixed(ms >= 100 ? 0 : ms >= 10 ? 1 : 2);
  const plural = (n, w) => n + ' ' + w + (n === 1 ? '' : 's');

  async function getJSON(url) {
    const res = await fetch(url, { headers: { Accept: 'application/json' } });
    if (!res.ok) throw new Error(url + ': HTTP ' + res.status);
    return res.json();
  }

  // The server's page includes Chart.js and this file; the drawing code is a file of its own.
  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const s = el('script', { src });
      s.onload = resolve;
      s.onerror = () => reject(new Error(src + ' did not load'));
      document.head.append(s);
    });
  }

  // ================================================================ state

  const S = {
    info: null,           // GET /api/runs/ID
    world: 1, stepsTotal: 0, lab: '', device: '', backend: '',
    status: 'running',
    lossFloor: null,
    loss: [],             // rank 0: [{x: step, y: loss}], in step order
    ref: null,            // the reference run's [{x, y}], or a string saying why there is none
    refName: '',          // its id, when it is one of this server's runs
    refAsked: false,      // the server has been asked which run the reference is
    last: [],             // per rank: its latest step event
    ended: [],            // per rank: its end event
    spans: [],            // per rank: Map(step -> [span]) for steps the timeline may still show
    checks: new Map(),    // name -> [{rank, ok, value, expect}]
    errors: [],
    connection: '',       // why the stream is not flowing, when it is not
    final: false,         // the server has said the run is over (its description or the stream's end)
    streamDone: false,    // every event has arrived
  };

  // The last complete step: every rank has logged its step event for it (spans come before
  // it, and a late span of a finished step still joins it). While the run goes on, a rank
  // that has not stepped yet means there is no complete step; once it has ended, the ranks
  // that stepped decide. A lab that logs spans but no step events (collectives: one "step"
  // per message size) shows, once its stream is over, the last step its ranks all reached.
  function timelineStep() {
    let step = -1;
    if (!S.last.length) {
      if (!S.streamDone) return -1;
      for (const m of S.spans) {
        if (!m || !m.size) continue;
        const top = Math.max(...m.keys());
        if (step < 0 || top < step) step = top;
      }
      return step;
    }
    for (let r = 0; r < S.world; r++) {
      const ev = S.last[r];
      if (!ev) { if (S.status === 'running') return -1; continue; }
      if (step < 0 || ev.step < step) step = ev.step;
    }
    return step;
  }

  function ingest(ev) {
    const r = typeof ev.rank === 'number' ? ev.rank : 0;
    if (r >= S.world) S.world = r + 1;
    switch (ev.ev) {
      case 'start':
        if (r === 0 && 'loss_floor' in ev) S.lossFloor = typeof ev.loss_floor === 'number' ? ev.loss_floor : null;
        if (ev.world) S.world = Math.max(S.world, ev.world);
        if (ev.device) S.device = ev.device;
        if (ev.backend) S.backend = ev.backend;
        // The start event carries the config too: the step count is known from it even when
        // the page opened before the run had written meta.json.
        if (ev.config && ev.config.steps > S.stepsTotal) S.stepsTotal = ev.config.steps;
        // So does the reference (--ref): rank 0 wrote meta.json before this event, so the
        // server can now say whether the reference is one of its runs, to draw it.
        if (r === 0 && ev.config && ev.config.ref && !S.refAsked) askRef();
        break;
      case 'step':
        if (!S.last[r] || ev.step >= S.last[r].step) S.last[r] = ev;
        if (r === 0 && typeof ev.loss === 'number') addLoss(ev.step, ev.loss);
        if (ev.step > S.stepsTotal) S.stepsTotal = ev.step;
        prune();
        break;
      case 'span': {
        const m = S.spans[r] || (S.spans[r] = new Map());
        const list = m.get(ev.step);
        if (list) list.push(ev); else m.set(ev.step, [ev]);
        break;
      }
      case 'check': {
        const list = S.checks.get(ev.name) || [];
        list.push({ rank: r, ok: ev.ok === true, value: ev.value, expect: ev.expect });
        S.checks.set(ev.name, list);
        break;
      }
      case 'error':
        S.errors.push({ rank: r, msg: String(ev.msg) });
        break;
      case 'end':
        S.ended[r] = ev;
        // Every rank has ended: the run has, whatever the stream says next (the server's
        // own end message, with the launcher's word on the status, normally follows).
        if (S.status === 'running' && ranksEnded()) {
          S.status = S.ended.some((e) => e && e.status !== 'ok') ? 'error' : 'ok';
        }
        break;
    }
  }

  function ranksEnded() {
    for (let r = 0; r < S.world; r++) if (!S.ended[r]) return false;
    return true;
  }

  function addLoss(step, loss) {
    const L = S.loss;
    if (!L.length || step > L[L.length - 1].x) { L.push({ x: step, y: loss }); return; }
    // A step seen again (a resumed run repeats steps): the newer value replaces it.
    let i = L.length - 1;
    while (i > 0 && L[i - 1].x >= step) i--;
    if (L[i].x === step) L[i].y = loss; else L.splice(i, 0, { x: step, y: loss });
  }

  // Spans of steps older than the timeline's step will never be drawn: drop them, so a long
  // run's replay holds a few steps of spans, not all of them.
  function prune() {
    const keep = timelineStep();
    if (keep < 0) return;
    for (const m of S.spans) {
      if (!m) continue;
      for (const step of m.keys()) if (step < keep) m.delete(step);
    }
  }

  // ================================================================ the page's skeleton

  const ui = {};
  function skeleton() {
    ui.h1 = el('h1', { text: 'Run ' + RUN });
    // The status line is a live region; its step counter changes up to five times a second,
    // too often to read aloud, so the visible counter is hidden from screen readers and a
    // second one, for them only, moves in tenths of the run.
    ui.status = el('p', { id: 'run-status', 'aria-live': 'polite', 'aria-atomic': 'true' });
    ui.progress = el('progress', { id: 'run-progress', max: '1', value: '0', 'aria-label': 'steps done' });
    ui.argv = el('p', { class: 'run-argv' });
    ui.errors = el('div', { class: 'run-errors', role: 'alert', hidden: '' });
    const panel = (id, title, note, wide) => {
      const h = el('h2', { id: id + '-h', text: title });
      const n = el('p', { class: 'note', text: note || '' });
      const s = el('section', { class: 'panel' + (wide ? ' wide' : ''), id: id, 'aria-labelledby': id + '-h' }, h, n);
      return { s, h, n };
    };
    ui.loss = panel('p-loss', 'Loss', 'rank 0, mean cross-entropy over the global batch (nats/token), before each update', true);
    ui.time = panel('p-time', 'Step time per rank', 'the latest step of each rank');
    ui.mem = panel('p-mem', 'Memory per rank', 'the latest step of each rank, MiB by category');
    ui.gantt = panel('p-gantt', 'Timeline', 'waiting for a complete step ...', true);
    ui.summary = panel('p-summary', 'Summary', '', false);
    ui.checks = panel('p-checks', 'Checks the lab made on itself', '', false);
    ui.grade = panel('p-grade', 'Grade', 'the lab\u2019s invariants checked on this run\u2019s logs, against a single-rank ' +
      'reference run on the same global batch and the method\u2019s formulas', true);
    ui.summary.s.hidden = true;
    ui.checks.s.hidden = true;
    ui.grade.s.hidden = true;
    ui.config = el('details', { class: 'data' });
    root.textContent = '';
    root.append(ui.h1, ui.status, ui.progress, ui.argv, ui.errors,
      el('div', { class: 'panels' }, ui.loss.s, ui.time.s, ui.mem.s, ui.gantt.s, ui.summary.s, ui.checks.s, ui.grade.s),
      ui.config);
  }

  // ================================================================ status line

  // The line's parts are built once and only their text changes: a live region announces
  // what changed in it, and rebuilding it would announce all of it five times a second.
  function statusParts() {
    const sep = () => el('span', { class: 'sep', 'aria-hidden': 'true', text: '\u00b7' });
    const p = {
      lab: el('span'), ranks: el('span'), where: el('span'),
      step: el('span', { 'aria-hidden': 'true' }), spoken: el('span', { class: 'sr-only' }),
      status: el('span'), conn: el('span', { class: 'muted' }),
    };
    ui.status.replaceChildren(p.lab, sep(), p.ranks, sep(), p.where, sep(), p.step, p.spoken, sep(), p.status, p.conn);
    return p;
  }
  const setText = (node, text) => { if (node.textContent !== text) node.textContent = text; };

  function renderStatus() {
    const p = ui.st || (ui.st = statusParts());
    const k = S.loss.length ? S.loss[S.loss.length - 1].x : S.last.reduce((m, e) => (e && e.step > m ? e.step : m), 0);
    const total = S.stepsTotal || k;
    setText(p.lab, S.lab);
    setText(p.ranks, plural(S.world, 'rank'));
    setText(p.where, S.device ? S.device + (S.backend ? ' (' + S.backend + ')' : '') : 'device unknown');
    // A lab without training steps (collectives) has no step counter to show.
    const noSteps = S.streamDone && !S.last.length;
    const stepText = noSteps ? 'no training steps' : 'step ' + k + ' of ' + total;
    setText(p.step, stepText);
    // Screen readers hear the step in tenths of the run while it trains, exactly at the end.
    const spoken = S.status === 'running' && total ? Math.floor(Math.floor((10 * k) / total) * total / 10) : k;
    setText(p.spoken, noSteps ? stepText : 'step ' + spoken + ' of ' + total);
    setText(p.status, S.status);
    p.status.className = 'st-' + S.status;
    setText(p.conn, S.connection ? ' \u00b7 ' + S.connection : '');
    ui.progress.hidden = noSteps;
    ui.progress.max = total || 1;
    ui.progress.value = k;
    ui.progress.textContent = stepText;

    if (S.errors.length) {
      ui.errors.hidden = false;
      ui.errors.replaceChildren(el('h2', { text: plural(S.errors.length, 'error') }),
        el('ul', null, ...S.errors.map((e) => el('li', null, el('strong', { text: 'rank ' + e.rank + ': ' }), e.msg))));
    }
  }

  // ================================================================ what the panels show

  // (2) Step time: compute plain, communication hatched; "other" only when a lab's step
  // time holds more than its compute and comm (time it counted as neither).
  const TIME_UNIT = { name: 'ms', fmt: fmtMs };
  function timeValue(e, key) {
    if (!e || !e.ms) return 0;
    if (key === 'other') return Math.max(0, (e.ms.step || 0) - (e.ms.compute || 0) - (e.ms.comm || 0));
    return e.ms[key] || 0;
  }
  function timeParts() {
    const parts = [
      { key: 'compute', label: 'compute', short: 'compute', letter: 'cmp', colour: 'compute', pattern: 'solid' },
      { key: 'comm', label: 'communication (collectives, send/recv)', short: 'comm', letter: 'com', colour: 'comm', pattern: 'diag' },
    ];
    if (S.last.some((e) => e && e.ms && timeValue(e, 'other') > 0.01 * e.ms.step)) {
      parts.push({ key: 'other', label: 'other (the loop\u2019s bookkeeping: logging, hashing, checkpoints)', short: 'other', letter: 'o', colour: 'other', pattern: 'dots' });
    }
    return parts;
  }

  // (3) Memory: the schema's categories in its order, then any a lab added; host last,
  // because it is host memory held for the device, outside the device's peak.
  const MEM_UNIT = { name: 'MiB', fmt: (v) => fmtMiB(v * MiB) };
  const MEM_KNOWN = [
    { key: 'params', label: 'params (weights)', short: 'params', letter: 'P', colour: 'params', pattern: 'solid' },
    { key: 'grads', label: 'grads', short: 'grads', letter: 'G', colour: 'grads', pattern: 'diag' },
    { key: 'optim', label: 'optim (AdamW state)', short: 'optim', letter: 'O', colour: 'optim', pattern: 'cross' },
    { key: 'acts', label: 'acts (activations)', short: 'acts', letter: 'A', colour: 'acts', pattern: 'dots' },
    { key: 'comm', label: 'comm (buffers)', short: 'comm', letter: 'C', colour: 'commbuf', pattern: 'horiz' },
  ];
  function memParts() {
    const seen = new Set();
    for (const e of S.last) if (e && e.mem) for (const k of Object.keys(e.mem)) if (k !== 'peak') seen.add(k);
    const parts = MEM_KNOWN.slice();
    for (const k of seen) {
      if (k === 'host' || MEM_KNOWN.some((p) => p.key === k)) continue;
      parts.push({ key: k, label: k, short: k, letter: k[0].toUpperCase(), colour: 'other', pattern: 'back' });
    }
    if (seen.has('host')) {
      parts.push({ key: 'host', label: 'host (host memory for the device; not in peak)', short: 'host', letter: 'H', colour: 'host', pattern: 'vert' });
    }
    return parts;
  }

  const ranks = () => Array.from({ length: S.world }, (_, r) => r);
  const stepOf = (r) => (S.last[r] ? S.last[r].step : null);

  function renderLoss() {
    const ref = Array.isArray(S.ref) ? S.ref : null;
    const lastX = (pts) => (pts && pts.length ? pts[pts.length - 1].x : 1);
    charts.loss.update({
      loss: S.loss, ref, floor: S.lossFloor,
      refName: S.refName, refNote: typeof S.ref === 'string' ? S.ref : '',
      // The axis spans the whole run from the start, so the curve grows into it (and the
      // reference's length, when that is longer).
      maxX: Math.max(S.stepsTotal, lastX(S.loss), lastX(ref), 2),
    });
  }

  function renderTime() {
    const steps = ranks().map(stepOf), parts = timeParts();
    ui.time.n.textContent = !S.last.length ? 'waiting for the first step ...'
      : (steps.every((s) => s === steps[0]) ? 'step ' + steps[0] : 'each rank\u2019s latest step') + '; compute plain, communication hatched';
    charts.time.update({
      parts, steps, title: 'Step time per rank', marks: [],
      values: ranks().map((r) => parts.map((p) => timeValue(S.last[r], p.key))),
      totals: ranks().map((r) => (S.last[r] && S.last[r].ms ? fmtMs(S.last[r].ms.step) + ' ms' : null)),
    });
  }

  function renderMem() {
    const mem = (r) => (S.last[r] && S.last[r].mem) || {}, parts = memParts();
    ui.mem.n.textContent = !S.last.length ? 'waiting for the first step ...'
      : 'after the latest step, MiB by category; the dashed tick is the peak since start (transient buffers included)';
    charts.mem.update({
      parts, steps: ranks().map(stepOf), title: 'Memory per rank', totals: [],
      values: ranks().map((r) => parts.map((p) => (mem(r)[p.key] || 0) / MiB)),
      marks: ranks().map((r) => (typeof mem(r).peak === 'number' ? [{ x: mem(r).peak / MiB, text: 'peak ' + fmtMiB(mem(r).peak) }] : [])),
    });
  }

  function renderTimeline() {
    const step = timelineStep();
    charts.timeline.draw({ step, rows: ranks().map((r) => (S.spans[r] && S.spans[r].get(step)) || []) });
  }

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
  function kvTable(pairs, caption) {
    return el('table', { class: 'kv' }, el('caption', { class: 'sr-only', text: caption }),
      el('tbody', null, ...pairs.map(([k, v]) => el('tr', null, el('th', { scope: 'row', text: k }), el('td', { text: show(k, v) })))));
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
    ui.summary.n.textContent = 'summary.json, written by rank 0 at the end';
    // Scalars (and small objects, flattened) in one table; a list of records (the
    // collectives lab's measurements) as a table of its own, folded when long.
    const pairs = [], lists = [];
    for (const [k, v] of Object.entries(sum)) {
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

  function renderChecks() {
    if (!S.checks.size) return;
    ui.checks.s.hidden = false;
    let bad = 0;
    const items = [];
    for (const [name, list] of S.checks) {
      const failed = list.filter((c) => !c.ok);
      bad += failed.length;
      const li = el('li', { class: failed.length ? 'bad' : 'ok' }, el('span', { class: 'mark', text: failed.length ? 'FAILED' : 'ok' }), name);
      if (failed.length) {
        li.append(' \u2014 ' + failed.map((c) => 'rank ' + c.rank + ': ' + js(c.value) + ', expected ' + js(c.expect)).join('; '));
      } else {
        const c = list[0];
        li.append(el('span', { class: 'muted', text: ' (' + plural(new Set(list.map((x) => x.rank)).size, 'rank') + (c.value !== undefined ? '; ' + js(c.value) : '') + ')' }));
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
    gradeSay('grading\u2026 the grader reads the logs and may start a single-rank reference run; this takes a few seconds', false);
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
    if (!S.final) return;
    if (G.state === 'idle') {
      G.body = el('div', { class: 'grade-body' });
      G.status = el('p', { class: 'grade-status', role: 'status' });
      G.cmd = el('code');
      ui.grade.s.append(G.body, G.status, el('p', { class: 'note grade-cmd' }, 'In a terminal: ', G.cmd));
      ui.grade.s.hidden = false;
      loadGrade();
    }
    // The summary (and so the run's directory as the launcher wrote it) may arrive later.
    const sum = S.info && S.info.summary;
    setText(G.cmd, 'shardlab grade ' + ((sum && sum.run_dir) || 'runs/' + RUN));
  }

  // ================================================================ drawing, batched

  const charts = {};
  let timer = 0, lastDraw = 0, checksSeen = -1;
  function invalidate() {
    if (timer) return;
    timer = setTimeout(() => { timer = 0; window.requestAnimationFrame(render); },
      Math.max(0, REDRAW_MS - (performance.now() - lastDraw)));
  }

  function render() {
    lastDraw = performance.now();
    renderStatus();
    // Loss, step time and memory come from step events; a lab without them leaves them out.
    const noSteps = S.streamDone && !S.last.length;
    for (const p of [ui.loss, ui.time, ui.mem]) p.s.hidden = noSteps;
    const C = window.ShardlabCharts;
    if (C && window.Chart) {
      if (!charts.loss) charts.loss = C.LossChart(ui.loss);
      // The bar charts' heights follow the number of ranks, which events may still raise.
      if (!charts.time || charts.time.world !== S.world) {
        for (const k of ['time', 'mem']) if (charts[k]) charts[k].destroy();
        charts.time = C.BarChart(ui.time, TIME_UNIT, S.world);
        charts.mem = C.BarChart(ui.mem, MEM_UNIT, S.world);
      }
      renderLoss();
      renderTime();
      renderMem();
    } else {
      const why = C ? '/static/vendor/chart.min.js' : '/static/charts.js';
      for (const p of [ui.loss, ui.time, ui.mem]) p.n.textContent = 'charts need ' + why + ', which did not load';
    }
    if (C) {
      if (!charts.timeline) charts.timeline = C.Timeline(ui.gantt);
      renderTimeline();
    }
    const nchecks = Array.from(S.checks.values()).reduce((n, l) => n + l.length, 0);
    if (nchecks !== checksSeen) { checksSeen = nchecks; renderChecks(); }
    renderSummary();
    renderGrade();
  }

  // A change of colour scheme (or of forced colours) draws everything again in the new
  // colours; the charts are built anew, since Chart.js keeps the colours it was given.
  function retheme() {
    if (!window.ShardlabCharts) return;
    window.ShardlabCharts.retheme();
    for (const k of ['loss', 'time', 'mem']) if (charts[k]) { charts[k].destroy(); delete charts[k]; }
    invalidate();
  }
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', retheme);
  window.matchMedia('(forced-colors: active)').addEventListener('change', retheme);

  // ================================================================ data in

  async function askRef() {
    S.refAsked = true;
    try {
      const info = await getJSON(api);
      if (info.ref) loadRef(info.ref);
    } catch (err) {
      S.ref = 'could not be loaded: ' + err.message;
      invalidate();
    }
  }

  async function loadRef(ref) {
    S.refName = ref;
    const pts = [];
    let from = 0;
    try {
      for (;;) {
        const page = await getJSON('/api/runs/' + encodeURIComponent(ref) + '/events?from=' + from + '&kind=step&rank=0');
        for (const ev of page.events || []) if (ev.ev === 'step' && typeof ev.loss === 'number') pts.push({ x: ev.step, y: ev.loss });
        if (page.done || page.next == null || page.next <= from) break;
        from = page.next;
      }
      pts.sort((a, b) => a.x - b.x);
      S.ref = pts;
    } catch (err) {
      S.ref = 'could not be loaded: ' + err.message;
    }
    invalidate();
  }

  function finish(status) {
    if (status) S.status = status;
    S.final = true;
    // summary.json is rank 0's last write; ask again for it, a few times if it lags the end.
    let tries = 0;
    const again = async () => {
      try {
        const info = await getJSON(api);
        S.info = info;
        if (info.status && info.status !== 'running' && !status) S.status = info.status;
        if (!info.summary && ++tries < 5) setTimeout(again, 1000);
      } catch (_) {
        if (++tries < 5) setTimeout(again, 1000);
      }
      invalidate();
    };
    again();
    invalidate();
  }

  // Ids count up through the run's events; one seen before (a server that replays after a
  // reconnect) would count a step or a span twice, so it is skipped. Kept across streams: a
  // stream opened again starts after the last event this page has.
  let lastId = -1;
  function stream() {
    const es = new EventSource(api + '/stream?from=' + (lastId + 1));
    es.onmessage = (m) => {
      const id = Number(m.lastEventId);
      if (m.lastEventId !== '' && Number.isFinite(id)) {
        if (id <= lastId) return;
        lastId = id;
      }
      let ev;
      try { ev = JSON.parse(m.data); } catch (_) { return; }
      ingest(ev);
      if (S.connection) S.connection = '';
      invalidate();
    };
    es.addEventListener('end', (m) => {
      es.close();
      let status = null;
      try { status = JSON.parse(m.data).status; } catch (_) { /* keep the API's word */ }
      S.connection = '';
      S.streamDone = true;
      finish(status);
    });
    // EventSource reconnects by itself and the server resumes after the last event id; the
    // status line says so meanwhile. A stream the server refused (503: as many streams open
    // as it takes) is closed for good by the browser: the page asks again in a few seconds.
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED && !S.streamDone) {
        S.connection = 'live updates paused (the server is busy), retrying ...';
        setTimeout(stream, 5000);
      } else {
        S.connection = 'reconnecting ...';
      }
      invalidate();
    };
  }

  async function start() {
    skeleton();
    // The drawing code loads while the run's description arrives; without it the status,
    // summary and checks still work.
    const drawing = loadScript('/static/charts.js').catch(() => null);
    try {
      S.info = await getJSON(api);
    } catch (err) {
      root.replaceChildren(el('h1', { text: 'Run ' + RUN }), el('p', { role: 'alert', text: 'Could not load this run: ' + err.message }));
      return;
    }
    const info = S.info, meta = info.meta || {};
    S.lab = info.lab || meta.lab || '';
    S.world = info.world || meta.world_size || meta.world || 1;
    S.status = info.status || 'running';
    S.final = S.status !== 'running';
    S.device = meta.device || '';
    S.backend = meta.backend || '';
    S.stepsTotal = (meta.config && meta.config.steps) || (info.summary && info.summary.steps) || 0;
    if (Array.isArray(meta.argv)) ui.argv.replaceChildren(el('code', { text: meta.argv.join(' ') }));
    if (meta.config) {
      ui.config.replaceChildren(el('summary', { text: 'configuration (meta.json)' }),
        kvTable(Object.entries(meta.config), 'configuration of run ' + RUN));
    }
    if (info.ref) S.refAsked = true, loadRef(info.ref);
    await drawing;
    invalidate();
    stream();
  }

  start();
})();
