// run.js — a run's dashboard, live while the run trains and the same afterwards (replay).
//
// The server gives the run's description (GET /api/runs/ID) and then its events, all of them
// from the first, as one Server-Sent Events stream; this script feeds them to the little
// state the panels need (run_state.js: rank 0's loss, each rank's latest step, the spans of
// the steps the timeline may show) and redraws at most five times a second, so a fast run or
// the replay of a long one streams tens of thousands of events without freezing the page.
//
// Panels: status line; (1) loss of rank 0 with the loss floor and a reference run; (2) step
// time per rank, compute and communication; (3) memory per rank by category; (4) the timeline
// of the last complete step; (5) at the end, summary and checks; (6) the grade: the lab's
// rubric (GET/POST /api/runs/ID/grade). This file builds the page and decides what the status
// line and (1) to (4) show, run_end.js what (5) and (6) show; charts.js draws (1) to (3),
// timeline.js (4). A lab that trains nothing (collectives) has none of (1) to (4): its main
// figure instead, the bus bandwidth by message size, which run_collectives.js describes. The
// other five files are loaded from here.
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
  window.ShardlabDom = { el };  // charts.js and run_end.js draw with the same helper

  const fmtMiB = (b) => { const m = b / MiB; return m.toFixed(m >= 100 ? 0 : m >= 10 ? 1 : 2); };
  const fmtMs = (ms) => ms.toFixed(ms >= 100 ? 0 : ms >= 10 ? 1 : 2);
  const plural = (n, w) => n + ' ' + w + (n === 1 ? '' : 's');

  async function getJSON(url) {
    const res = await fetch(url, { headers: { Accept: 'application/json' } });
    if (!res.ok) throw new Error(url + ': HTTP ' + res.status);
    return res.json();
  }

  // The server's page includes Chart.js and this file; the state, the end-of-run panels and
  // the drawing code are files of their own.
  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const s = el('script', { src });
      s.onload = resolve;
      s.onerror = () => reject(new Error(src + ' did not load'));
      document.head.append(s);
    });
  }

  // ================================================================ state

  // The state and how each event changes it (run_state.js), and the end-of-run panels
  // (run_end.js): start() sets these once their files have loaded, before the first event.
  let state = null, S = null, end = null;
  // The collectives lab's words and figure (run_collectives.js), for a lab that trains nothing.
  let coll = null;

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
    ui.busbw = panel('p-busbw', 'Bus bandwidth by message size', '', true);
    ui.loss = panel('p-loss', 'Loss', 'rank 0, mean cross-entropy over the global batch (nats/token), before each update', true);
    ui.experts = panel('p-experts', 'Experts: tokens per expert', '', true);
    ui.time = panel('p-time', 'Step time per rank', 'the latest step of each rank');
    ui.mem = panel('p-mem', 'Memory per rank', 'the latest step of each rank, MiB by category');
    ui.gantt = panel('p-gantt', 'Timeline', 'waiting for a complete step ...', true);
    ui.summary = panel('p-summary', 'Summary', '', false);
    ui.checks = panel('p-checks', 'Checks the lab made on itself', '', false);
    ui.grade = panel('p-grade', 'Grade', '', true);
    ui.busbw.s.hidden = true;
    ui.experts.s.hidden = true;
    ui.summary.s.hidden = true;
    ui.checks.s.hidden = true;
    ui.grade.s.hidden = true;
    ui.config = el('details', { class: 'data' });
    ui.trace = document.querySelector('.run-trace');  // (the server's, beside the dashboard)
    root.textContent = '';
    root.append(ui.h1, ui.status, ui.progress, ui.argv, ui.errors,
      el('div', { class: 'panels' }, ui.busbw.s, ui.loss.s, ui.experts.s, ui.time.s, ui.mem.s, ui.gantt.s, ui.summary.s, ui.checks.s, ui.grade.s),
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
      rate: el('span', { class: 'rate' }), status: el('span'), conn: el('span', { class: 'muted' }),
    };
    ui.status.replaceChildren(p.lab, sep(), p.ranks, sep(), p.where, sep(), p.step, p.spoken, p.rate, sep(), p.status, p.conn);
    return p;
  }
  const setText = (node, text) => { if (node.textContent !== text) node.textContent = text; };

  // The pace, as the terminal's header gives it: the time left at the last 20 steps' pace
  // (while it runs), tokens a second (the summary's at the end, else the global batch's tokens
  // over that pace) and ms a step.
  function rateText(k, total) {
    const ms = S.ms.length ? S.ms.reduce((a, b) => a + b, 0) / S.ms.length : 0;
    const sum = S.info && S.info.summary, tokens = S.batchTokens;
    const tps = S.final && sum && sum.tokens_per_s > 0 ? sum.tokens_per_s : ms > 0 && tokens ? tokens / (ms / 1000) : 0;
    const parts = [];
    if (S.status === 'running' && ms > 0 && total > k) {
      const left = Math.round(((total - k) * ms) / 1000);
      parts.push('ETA ' + (left >= 3600 ? Math.floor(left / 3600) + 'h' : '') + String(Math.floor((left % 3600) / 60)).padStart(left >= 3600 ? 2 : 1, '0') +
        ':' + String(left % 60).padStart(2, '0'));
    }
    if (tps > 0) parts.push((tps >= 1e6 ? (tps / 1e6).toFixed(2) + 'M' : tps >= 1e3 ? (tps / 1e3).toFixed(1) + 'k' : Math.round(tps)) + ' tok/s');
    if (ms > 0) parts.push(fmtMs(ms) + ' ms/step');
    return parts.length ? ' \u00b7 ' + parts.join(' \u00b7 ') : '';
  }

  function renderStatus() {
    const p = ui.st || (ui.st = statusParts());
    // The collectives lab counts its measurements (a collective at a size), not steps.
    const m = coll ? coll.progress(S.info && S.info.meta && S.info.meta.config) : null;
    const k = m ? m.done : S.loss.length ? S.loss[S.loss.length - 1].x : S.last.reduce((m, e) => (e && e.step > m ? e.step : m), 0);
    const total = m ? m.total : S.stepsTotal || k;
    setText(p.lab, S.lab);
    setText(p.ranks, plural(S.world, 'rank'));
    // The device is known once the run has started (its meta.json or start event); a run
    // that stopped before has none to name.
    setText(p.where, S.device ? S.device + (S.backend ? ' (' + S.backend + ')' : '') : S.final ? 'did not start' : 'starting');
    // A run that ended before its first step has no step counter to show.
    const noSteps = !m && S.streamDone && !S.last.length;
    const stepText = m ? m.text : noSteps ? 'no training steps' : 'step ' + k + ' of ' + total;
    setText(p.step, stepText);
    // Screen readers hear the step in tenths of the run while it trains, exactly at the end.
    const spoken = S.status === 'running' && total ? Math.floor(Math.floor((10 * k) / total) * total / 10) : k;
    setText(p.spoken, noSteps || m ? stepText : 'step ' + spoken + ' of ' + total);
    setText(p.rate, noSteps || m ? '' : rateText(k, total));
    setText(p.status, S.status);
    p.status.className = 'st-' + S.status;
    setText(p.conn, S.connection ? ' \u00b7 ' + S.connection : '');
    ui.progress.hidden = noSteps || (m && !total);
    ui.progress.max = total || 1;
    ui.progress.value = k;
    ui.progress.textContent = stepText;

    // A run whose ranks could log nothing (a full disk) has only its launcher to say why it
    // failed: the server kept its last lines (GET /api/runs/ID's "launcher").
    const launcher = S.info && S.info.launcher && S.status !== 'ok' ? S.info.launcher : null;
    if (!S.errors.length && launcher && launcher.said) {
      ui.errors.hidden = false;
      ui.errors.replaceChildren(el('h2', { text: 'What the launcher said (exit status ' + launcher.exit + ')' }),
        el('pre', { class: 'launcher-said', text: launcher.said.trim() }));
    }
    if (S.errors.length) {
      const groups = state.errorGroups();
      const who = (ranks) => ranks.length === 1 ? 'rank ' + ranks[0] : ranks.length === S.world && S.world > 1 ? 'every rank'
        : 'ranks ' + ranks.slice().sort((a, b) => a - b).join(', ');
      ui.errors.hidden = false;
      ui.errors.replaceChildren(el('h2', { text: plural(groups.length, 'error') }),
        el('ul', null, ...groups.map((g) => el('li', null, el('strong', { text: who(g.ranks) + ': ' }), g.msg))));
    }
    // The timeline's download (the page's, outside the dashboard) once there is one to give.
    if (S.started && ui.trace && ui.trace.hidden) ui.trace.hidden = false;
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
      { key: 'comm', label: 'communication the step waited for (exposed)', short: 'comm', letter: 'com', colour: 'comm', pattern: 'diag' },
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

  // A panel with nothing to show yet, or ever: a run that ended before its first step (the
  // errors above say why).
  function noStepYet() {
    return S.final ? 'the run ended before its first step' : 'waiting for the first step ...';
  }

  // Communication named both ways: the hatched part is what the step waited for (exposed);
  // the spans of the timeline's step say how much there was in all, and how much of it ran
  // behind compute (hidden); the step event says how many bytes rank 0 sent.
  function commNote() {
    const step = state.timelineStep(), sent = S.last[0] && S.last[0].bytes ? S.last[0].bytes.sent : null;
    const c = step >= 0 && window.ShardlabTimeline ? window.ShardlabTimeline.commOf(S.spans[0] && S.spans[0].get(step)) : null;
    let text = '';
    if (c && c.total > 0)
      text += '. Rank 0 at step ' + step + ': ' + fmtMs(c.total) + ' ms of communication in all, ' +
        Math.round((100 * c.hidden) / c.total) + '% of it hidden behind compute';
    if (typeof sent === 'number' && sent > 0) text += (text ? '; ' : '. Rank 0 ') + 'sent ' + fmtMiB(sent) + ' MiB a step';
    return text;
  }

  function renderTime() {
    const steps = ranks().map(stepOf), parts = timeParts();
    ui.time.n.textContent = !S.last.length ? noStepYet()
      : (steps.every((s) => s === steps[0]) ? 'step ' + steps[0] : 'each rank\u2019s latest step') +
        '; compute plain, the communication the step waited for hatched' + commNote();
    charts.time.update({
      parts, steps, title: 'Step time per rank', marks: [],
      values: ranks().map((r) => parts.map((p) => timeValue(S.last[r], p.key))),
      totals: ranks().map((r) => (S.last[r] && S.last[r].ms ? fmtMs(S.last[r].ms.step) + ' ms' : null)),
    });
  }

  function renderMem() {
    const mem = (r) => (S.last[r] && S.last[r].mem) || {}, parts = memParts();
    ui.mem.n.textContent = !S.last.length ? noStepYet()
      : 'after the latest step, MiB by category; the dashed tick is the peak since start (transient buffers included)';
    charts.mem.update({
      parts, steps: ranks().map(stepOf), title: 'Memory per rank', totals: [],
      values: ranks().map((r) => parts.map((p) => (mem(r)[p.key] || 0) / MiB)),
      marks: ranks().map((r) => (typeof mem(r).peak === 'number' ? [{ x: mem(r).peak / MiB, text: 'peak ' + fmtMiB(mem(r).peak) }] : [])),
    });
  }

  function renderTimeline() {
    const step = state.timelineStep();
    charts.timeline.draw({ step, ended: S.final, rows: ranks().map((r) => (S.spans[r] && S.spans[r].get(step)) || []) });
  }

  // The collectives' figure: rank 0's measurements while they come, summary.json's table and
  // the memcpy ceiling once it is there. Drawn again only when either changes.
  function renderBusbw() {
    const sum = S.final && S.info ? S.info.summary : null;
    const key = S.measured + '|' + (sum ? 'summary' : '');
    ui.busbw.n.textContent = coll.figureNote(sum, S.info && S.info.meta && S.info.meta.config);
    if (!charts.busbw) charts.busbw = window.ShardlabCharts.BusbwChart(ui.busbw, coll.WORDS);
    else if (charts.busbw.key === key) return;
    charts.busbw.key = key;
    charts.busbw.update(coll.figure(sum));
  }

  // ================================================================ drawing, batched

  const charts = {};
  let timer = 0, lastDraw = 0, checksSeen = -1;
  function invalidate() {
    // Nothing to draw before start() has the state (a change of theme may come first).
    if (timer || !S) return;
    timer = setTimeout(() => { timer = 0; window.requestAnimationFrame(render); },
      Math.max(0, REDRAW_MS - (performance.now() - lastDraw)));
  }

  function render() {
    lastDraw = performance.now();
    renderStatus();
    // Loss, step time and memory come from step events; a lab without them leaves them out,
    // and so does one that trains nothing (collectives), whose one span a measurement makes no
    // timeline: its figure is the bus bandwidth.
    const noSteps = coll || (S.streamDone && !S.last.length);
    for (const p of [ui.loss, ui.time, ui.mem]) p.s.hidden = !!noSteps;
    ui.gantt.s.hidden = !!coll;
    ui.busbw.s.hidden = !coll;
    const C = window.ShardlabCharts;
    if (coll) {
      if (C && window.Chart) renderBusbw();
      else ui.busbw.n.textContent = 'the chart needs ' + (C ? '/static/vendor/chart.min.js' : '/static/charts.js') + ', which did not load';
    } else if (C && window.Chart) {
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
    // --moe: where the routers sent the tokens, once a step has said.
    ui.experts.s.hidden = !S.experts.length;
    if (S.experts.length && C && window.ShardlabExperts) {
      if (!charts.experts) charts.experts = window.ShardlabExperts.Experts(ui.experts);
      charts.experts.update(S);
    }
    if (C && !coll) {
      if (!charts.timeline && window.ShardlabTimeline) charts.timeline = window.ShardlabTimeline.Timeline(ui.gantt);
      if (charts.timeline) renderTimeline();
    }
    const nchecks = Array.from(S.checks.values()).reduce((n, l) => n + l.length, 0);
    if (nchecks !== checksSeen) { checksSeen = nchecks; end.renderChecks(); }
    end.renderSummary();
    end.renderGrade();
  }

  // A change of colour scheme (or of forced colours) draws everything again in the new
  // colours; the charts are built anew, since Chart.js keeps the colours it was given.
  function retheme() {
    if (!window.ShardlabCharts) return;
    window.ShardlabCharts.retheme();
    for (const k of ['loss', 'time', 'mem', 'busbw']) if (charts[k]) { charts[k].destroy(); delete charts[k]; }
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
      state.ingest(ev);
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
    // The other files load while the run's description arrives. The drawing code may fail to:
    // without it the status, summary and checks still work.
    const drawing = loadScript('/static/charts.js').then(() => Promise.all([loadScript('/static/timeline.js'),
      loadScript('/static/run_experts.js')])).catch(() => null);
    const parts = Promise.all([loadScript('/static/run_state.js'), loadScript('/static/run_end.js'), loadScript('/static/run_collectives.js')]);
    let info;
    try {
      [info] = await Promise.all([getJSON(api), parts]);
    } catch (err) {
      root.replaceChildren(el('h1', { text: 'Run ' + RUN }), el('p', { role: 'alert', text: 'Could not load this run: ' + err.message }));
      return;
    }
    state = window.ShardlabRunState(askRef);
    S = state.S;
    if (info.trains === false) {
      coll = window.ShardlabCollectives({ S, plural });
      // The link under the page says what a training run's Perfetto file holds: say this lab's.
      const trace = document.querySelector('.run-trace small');
      if (trace) trace.replaceChildren(coll.traceNote, el('code', { text: 'shardlab trace' }), ')');
    }
    end = window.ShardlabRunEnd({ S, ui, RUN, api, plural, fmtMiB, setText, coll });
    S.info = info;
    const meta = info.meta || {};
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
        end.kvTable(Object.entries(meta.config), 'configuration of run ' + RUN, coll ? coll.CONFIG_WORDS : null));
    }
    if (info.ref) S.refAsked = true, loadRef(info.ref);
    await drawing;
    invalidate();
    stream();
  }

  start();
})();
