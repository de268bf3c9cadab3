// run_state.js — what a run's dashboard knows: the little state its panels need (rank 0's
// loss, each rank's latest step, the spans of the steps the timeline may show, the checks,
// the errors) and how each of the run's events changes it. Nothing here draws or fetches:
// run.js loads this file, feeds it the stream's events (ingest) and draws from S.
'use strict';

// onRef: called when rank 0's start event names a reference run (--ref), for run.js to ask
// the server which of its runs that is.
window.ShardlabRunState = function (onRef) {
  // ================================================================ state

  const S = {
    info: null,           // GET /api/runs/ID
    world: 1, stepsTotal: 0, lab: '', device: '', backend: '',
    status: 'running',
    lossFloor: null,
    loss: [],             // rank 0: [{x: step, y: loss}], in step order
    ms: [],               // rank 0: its last 20 steps' ms.step (the rate and the ETA, as the terminal's)
    batchTokens: 0,       // B T of the global batch (the start event's config)
    started: false,       // a start event came: the lab got past its options and set up
    ref: null,            // the reference run's [{x, y}], or a string saying why there is none
    refName: '',          // its id, when it is one of this server's runs
    refAsked: false,      // the server has been asked which run the reference is
    last: [],             // per rank: its latest step event
    ended: [],            // per rank: its end event
    spans: [],            // per rank: Map(step -> [span]) for steps the timeline may still show
    checks: new Map(),    // name -> [{rank, ok, value, expect}]
    busbw: new Map(),     // collectives: rank 0's bus bandwidth, collective -> [{x: bytes, y: GB/s}]
    experts: [],          // --moe: rank 0's [{step, load: [L][E], aux, dropped, assignments}], in step order
    measured: 0,          // collectives: how many (collective, size) rows rank 0 has measured
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
        S.started = true;
        if (r === 0 && 'loss_floor' in ev) S.lossFloor = typeof ev.loss_floor === 'number' ? ev.loss_floor : null;
        if (ev.world) S.world = Math.max(S.world, ev.world);
        if (ev.device) S.device = ev.device;
        if (ev.backend) S.backend = ev.backend;
        // The start event carries the config too: the step count is known from it even when
        // the page opened before the run had written meta.json.
        if (ev.config && ev.config.steps > S.stepsTotal) S.stepsTotal = ev.config.steps;
        if (ev.config && ev.config.batch > 0 && ev.config.seq > 0) S.batchTokens = ev.config.batch * ev.config.seq;
        // So does the reference (--ref): rank 0 wrote meta.json before this event, so the
        // server can now say whether the reference is one of its runs, to draw it.
        if (r === 0 && ev.config && ev.config.ref && !S.refAsked) onRef();
        break;
      case 'step':
        if (!S.last[r] || ev.step >= S.last[r].step) S.last[r] = ev;
        if (r === 0 && typeof ev.loss === 'number') addLoss(ev.step, ev.loss);
        if (r === 0 && Array.isArray(ev.expert_load)) addExperts(ev);
        if (r === 0 && ev.ms && typeof ev.ms.step === 'number') {
          S.ms.push(ev.ms.step);
          if (S.ms.length > 20) S.ms.shift();
        }
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
        if (r === 0) addBusbw(String(ev.name), ev.value);
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

  // The collectives lab logs each row's bus bandwidth as a check named <collective>.<bytes>.busbw
  // (labs/03-collectives/collectives.c), on every rank: rank 0's draw the chart while the sizes are measured.
  function addBusbw(name, value) {
    const m = /^([a-z_]+)\.(\d+)\.busbw$/.exec(name);
    if (!m || typeof value !== 'number' || !isFinite(value)) return;
    const list = S.busbw.get(m[1]) || [];
    list.push({ x: Number(m[2]), y: value });
    S.busbw.set(m[1], list);
    S.measured++;
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

  // A step's routing (run_experts.js draws it). A long run keeps at most EXPERT_STEPS of them:
  // past that every other one goes, so the strip still spans the run, sampled evenly.
  const EXPERT_STEPS = 2000;
  function addExperts(ev) {
    const rows = ev.expert_load.filter((row) => Array.isArray(row)).map((row) => row.map((n) => (typeof n === 'number' ? n : 0)));
    if (!rows.length) return;
    const X = S.experts, item = { step: ev.step, load: rows, aux: ev.aux_loss, dropped: ev.dropped, assignments: ev.assignments };
    while (X.length && X[X.length - 1].step >= ev.step) X.pop();  // a resumed run repeats steps: the newer wins
    X.push(item);
    if (X.length > EXPERT_STEPS) S.experts = X.filter((_, i) => i % 2 === 0 || i === X.length - 1);
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

  // The errors as the page lists them: each message once, with the ranks that said it. Ranks
  // that fail at start say the same (a bad option, a batch that does not divide: every rank
  // gets the same options), each naming itself ("rank 2 failed (exit 2) ..."): messages equal
  // but for the rank that wrote them are one. A leading "rank r " is left to the ranks' label.
  function errorGroups() {
    const groups = new Map();
    for (const e of S.errors) {
      const own = new RegExp('\\brank ' + e.rank + '\\b', 'g');
      const key = e.msg.replace(own, 'rank #');
      const g = groups.get(key);
      if (g) { if (!g.ranks.includes(e.rank)) g.ranks.push(e.rank); continue; }
      const lead = 'rank ' + e.rank + ' ';
      groups.set(key, { ranks: [e.rank], msg: e.msg.startsWith(lead) ? e.msg.slice(lead.length) : e.msg });
    }
    return Array.from(groups.values());
  }

  return { S, ingest, timelineStep, errorGroups };
};
