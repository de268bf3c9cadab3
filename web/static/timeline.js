// timeline.js — panel (4) of a run's page: the last complete step of every rank as a Gantt
// chart, a lane each for compute and communication, every span a bar with its letter, the
// figures on the right exact (interval arithmetic, as the terminal's timeline computes them).
// It draws with charts.js's theme and patterns (window.ShardlabCharts), which loads first;
// run.js loads it and takes window.ShardlabTimeline: { Timeline, commOf }.
'use strict';

window.ShardlabTimeline = (function () {
  const { el } = window.ShardlabDom;
  const { fmt, theme, fill, haloText, hidpi, setLegend } = window.ShardlabCharts;

  // ================================================================ (4) the timeline

  // Every span is a bar with a letter, so the chart reads in black and white. Compute and
  // communication get a lane each per rank: with overlap they happen at the same time.
  const KINDS = {
    fwd: { letter: 'F', label: 'F forward', colour: 'fwd', pattern: 'solid', lane: 0 },
    bwd: { letter: 'B', label: 'B backward', colour: 'bwd', pattern: 'back', lane: 0 },
    recompute: { letter: 'R', label: 'R recompute (checkpointed forward)', colour: 'recompute', pattern: 'dots', lane: 0 },
    optim: { letter: 'O', label: 'O optimizer step', colour: 'optim-span', pattern: 'cross', lane: 0 },
    all_reduce: { letter: 'AR', label: 'AR all-reduce', colour: 'coll', pattern: 'diag', lane: 1 },
    reduce_scatter: { letter: 'RS', label: 'RS reduce-scatter', colour: 'commbuf', pattern: 'back', lane: 1 },
    all_gather: { letter: 'AG', label: 'AG all-gather', colour: 'params', pattern: 'dots', lane: 1 },
    coll: { letter: 'C', label: 'C other collective (broadcast, reduce, all-to-all, barrier, ...)', colour: 'coll', pattern: 'cross', lane: 1 },
    send: { letter: 'S', label: 'S send', colour: 'send', pattern: 'horiz', lane: 1 },
    recv: { letter: 'V', label: 'V receive', colour: 'recv', pattern: 'vert', lane: 1 },
    io: { letter: 'K', label: 'K checkpoint save/load', colour: 'other', pattern: 'solid', lane: 1 },
    // A collective between replicas (fsdp --replicate's sums, tp --dp's all-reduces: the
    // span's group says so), in lowercase: on a cluster, the one that crosses the network.
    across: { letter: 'ar', label: 'ar rs ag: a collective across replicas (on a cluster, over the network)',
      colour: 'across', pattern: 'vert', lane: 1 },
    // Context parallelism's keys and values on their way between the group's ranks (the
    // ring's blocks, or --kv all-gather's: the span's group is "cp"): attention's own traffic.
    kv: { letter: 'KV', label: 'KV attention\u2019s keys and values between ranks (context parallelism)',
      colour: 'kv', pattern: 'diag', lane: 1 },
    // Not a span's name: drawn over the compute lane where the rank waited for a call.
    wait: { letter: '', label: 'dotted: waiting for communication (not compute, so not hidden)', colour: 'wait',
      pattern: 'dots', lane: 0 },
  };
  // Any other name is a collective (broadcast, reduce, barrier, all_to_all, ...).
  const kindOf = (name) => (name === 'save' || name === 'load' ? 'io'
    : KINDS[name] && name !== 'coll' && name !== 'io' && name !== 'across' && name !== 'kv' && name !== 'wait' ? name : 'coll');
  const kvExchange = (s) => s.group === 'cp' && KINDS[kindOf(s.name)].lane === 1 && kindOf(s.name) !== 'io';
  const acrossReplicas = (s) => (s.group === 'replicate' || s.group === 'dp') && KINDS[kindOf(s.name)].lane === 1 &&
    s.name !== 'send' && s.name !== 'recv' && kindOf(s.name) !== 'io';
  // A span's kind, and its letter: a collective across replicas in its own colour, its
  // kind's letter in lowercase.
  const spanKind = (s) => (kvExchange(s) ? 'kv' : acrossReplicas(s) ? 'across' : kindOf(s.name));
  const spanLetter = (s) => (kvExchange(s) ? 'KV' : acrossReplicas(s) ? KINDS[kindOf(s.name)].letter.toLowerCase()
    : KINDS[kindOf(s.name)].letter);

  // Where the rank waited for a call (a blocking collective inside a forward, a ring step's
  // transfer not yet in): from its waited_from_us to its end. It was inside a compute span but
  // not computing, so that time is not compute, and communication then is not hidden.
  const waitOf = (s) => (KINDS[kindOf(s.name)].lane === 1 && s.waited_from_us > 0 && s.waited_from_us < s.t1_us
    ? [s.waited_from_us, s.t1_us] : null);

  // A rank's compute intervals (merged), less its waits, and its communication's.
  function lanes(spans) {
    const comp = [], comm = [], wait = [];
    for (const s of spans || []) {
      (KINDS[kindOf(s.name)].lane === 0 ? comp : comm).push([s.t0_us, s.t1_us]);
      const w = waitOf(s);
      if (w) wait.push(w);
    }
    return { work: subtract(merged(comp), merged(wait)), comm: merged(comm), all: merged(comp.concat(comm)) };
  }

  // A rank's communication in one step's spans: all of it, and the part that ran while the
  // rank computed (hidden), in ms (the step event's ms.comm is only what the step waited for).
  function commOf(spans) {
    const l = lanes(spans);
    return { total: length(l.comm) / 1000, hidden: overlap(l.work, l.comm) / 1000 };
  }

  // Exact figures by interval arithmetic, as the terminal dashboard computes them: "busy" is
  // the part of the step the rank spent on anything, "hidden" the part of its communication
  // that ran while it computed.
  function merged(iv) {
    iv.sort((a, b) => a[0] - b[0]);
    const out = [];
    for (const x of iv) {
      if (out.length && x[0] <= out[out.length - 1][1]) out[out.length - 1][1] = Math.max(out[out.length - 1][1], x[1]);
      else out.push([x[0], x[1]]);
    }
    return out;
  }
  const length = (iv) => iv.reduce((s, x) => s + x[1] - x[0], 0);
  // a less b, both merged.
  function subtract(a, b) {
    const out = [];
    let j = 0;
    for (const x of a) {
      let lo = x[0];
      while (j < b.length && b[j][1] <= lo) j++;
      for (let m = j; m < b.length && b[m][0] < x[1]; m++) {
        if (b[m][0] > lo) out.push([lo, b[m][0]]);
        lo = Math.max(lo, b[m][1]);
      }
      if (lo < x[1]) out.push([lo, x[1]]);
    }
    return out;
  }
  function overlap(a, b) {
    let s = 0;
    for (let i = 0, j = 0; i < a.length && j < b.length;) {
      const lo = Math.max(a[i][0], b[j][0]), hi = Math.min(a[i][1], b[j][1]);
      if (hi > lo) s += hi - lo;
      if (a[i][1] < b[j][1]) i++; else j++;
    }
    return s;
  }

  // panel: {s, h, n}; draw({step, rows}) with rows[r] the spans of rank r in that step.
  function Timeline(panel) {
    const canvas = el('canvas', { role: 'img' });
    const tip = el('div', { class: 'gantt-tip', hidden: '' });
    const box = el('div', { class: 'gantt-box' }, canvas, tip);
    const leg = el('div'), note = el('p', { class: 'note' });
    panel.s.append(box, leg, note);
    let hits = [], t0 = 0, width = 0, last = null;

    canvas.addEventListener('mousemove', (e) => {
      const rect = canvas.getBoundingClientRect();
      const x = e.clientX - rect.left, y = e.clientY - rect.top;
      const h = hits.find((b) => x >= b.x - 1 && x <= b.x + b.w + 1 && y >= b.y && y <= b.y + b.h);
      if (!h) { tip.hidden = true; return; }
      const s = h.span, a = (s.t0_us - t0) / 1000, b = (s.t1_us - t0) / 1000;
      const lines = [s.name + (s.group ? ' (' + s.group + ')' : '') + ' \u00b7 rank ' + s.rank + (s.mb >= 0 ? ' \u00b7 micro-batch ' + s.mb : '') + (s.layer >= 0 ? ' \u00b7 layer ' + s.layer : ''),
        fmt(a, 3) + ' \u2192 ' + fmt(b, 3) + ' ms (' + fmt(b - a, 3) + ' ms)'];
      if (s.bytes) lines.push(s.bytes >= 1024 ? fmt(s.bytes / 1024, 1) + ' KiB' : s.bytes + ' bytes');
      if (s.issued_us && s.t0_us > s.issued_us) lines.push('queued ' + fmt((s.t0_us - s.issued_us) / 1000, 3) + ' ms before it started');
      if (s.ring_step !== undefined) lines.push('ring step ' + s.ring_step);
      // A transfer's own hidden share: the part of it that ran while the rank computed.
      if (h.work && KINDS[kindOf(s.name)].lane === 1 && s.t1_us > s.t0_us) {
        const hid = overlap(h.work, [[s.t0_us, s.t1_us]]) / (s.t1_us - s.t0_us);
        lines.push(Math.round(100 * hid) + '% of it hidden behind compute' +
          (s.waited_from_us > 0 ? '; the rank waited ' + fmt((s.t1_us - s.waited_from_us) / 1000, 3) + ' ms for it' : ''));
      }
      tip.textContent = lines.join('\n');
      tip.hidden = false;
      tip.style.left = Math.max(0, Math.min(x + 12, box.clientWidth - tip.offsetWidth - 4)) + 'px';
      tip.style.top = (y + 14) + 'px';
    });
    canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
    // The canvas has a fixed pixel size: a new width (a turned phone, a resized window)
    // draws it again.
    if (window.ResizeObserver) {
      new ResizeObserver(() => { if (last && box.clientWidth !== width) draw(last); }).observe(box);
    }

    function draw(d) {
      last = d;
      const t = theme(), rows = d.rows, world = rows.length;
      let a = Infinity, b = -Infinity;
      for (const spans of rows) for (const s of spans) { a = Math.min(a, s.t0_us); b = Math.max(b, s.t1_us); }
      if (d.step < 0 || !isFinite(a)) {
        panel.h.textContent = 'Timeline';
        panel.n.textContent = d.step >= 0 ? 'step ' + d.step + ' logged no spans'
          : d.ended ? 'the run ended before every rank finished a step' : 'waiting for a step that every rank has finished ...';
        box.hidden = true;
        return;
      }
      box.hidden = false;
      if (b <= a) b = a + 1;
      t0 = a;
      const ms = (b - a) / 1000;
      panel.h.textContent = 'Timeline of step ' + d.step;
      panel.n.textContent = fmt(ms, 2) + ' ms from the first span to the last, on every rank\u2019s clock. ' +
        'Gaps are idle time: a pipeline bubble, or a rank waiting for a slower one.';

      const W = box.clientWidth || 600;
      width = W;
      // On a phone the labels shrink ("r0", "cmp") so that the bars keep most of the width.
      const narrow = W < 640;
      const padL = narrow ? 62 : 128, padR = narrow ? 62 : 100, top = 26, laneH = 22, gap = 12, rowH = 2 * laneH + gap;
      const H = top + world * rowH + 8;
      const ctx = hidpi(canvas, W, H);
      const pw = W - padL - padR, X = (us) => padL + ((us - a) / (b - a)) * pw;
      ctx.fillStyle = t.bg; ctx.fillRect(0, 0, W, H);

      // The time axis: ms from the step's first span, ticks at a round interval.
      const raw = ms / Math.max(2, Math.floor(pw / 90));
      const p10 = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p10;
      const tick = (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p10;
      const dec = Math.max(0, -Math.floor(Math.log10(tick)));
      ctx.font = t.font; ctx.textBaseline = 'alphabetic'; ctx.textAlign = 'center';
      for (let k = 0; k * tick <= ms + 1e-9; k++) {
        const x = padL + ((k * tick) / ms) * pw;
        ctx.strokeStyle = t.grid; ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(x, top - 4); ctx.lineTo(x, H - 8); ctx.stroke();
        ctx.fillStyle = t.muted; ctx.fillText((k * tick).toFixed(dec), x, top - 8);
      }
      ctx.textAlign = 'left'; ctx.fillText('ms', padL + pw + 8, top - 8);

      const mbs = new Set();
      rows.forEach((sp) => sp.forEach((s) => { if (s.mb >= 0) mbs.add(s.mb); }));
      const showMb = mbs.size > 1;  // micro-batch numbers matter in a pipeline or with accumulation
      hits = [];
      const said = [];
      let waited = false;
      rows.forEach((spans, r) => {
        const y = top + r * rowH;
        haloText(ctx, (narrow ? 'r' : 'rank ') + r, 2, y + laneH / 2, 'left', t.bold);
        ctx.fillStyle = t.muted; ctx.font = t.font; ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
        ctx.fillText(narrow ? 'cmp' : 'compute', padL - 6, y + laneH / 2);
        ctx.fillText('comm', padL - 6, y + laneH * 1.5);
        ctx.strokeStyle = t.fg; ctx.lineWidth = 1;
        ctx.strokeRect(padL - 0.5, y - 0.5, pw + 1, 2 * laneH + 1);
        const l = lanes(spans);
        for (const s of spans) {
          const k = KINDS[spanKind(s)], letter = spanLetter(s);
          const x0 = X(s.t0_us), w = Math.max(1, X(s.t1_us) - x0), yy = y + k.lane * laneH + 2, hh = laneH - 4;
          ctx.fillStyle = fill(k.pattern, k.colour);
          ctx.fillRect(x0, yy, w, hh);
          // An outline keeps neighbours of one kind (layer after layer) apart.
          if (w >= 3) { ctx.strokeStyle = t.fg; ctx.lineWidth = 1; ctx.strokeRect(x0 + 0.5, yy + 0.5, w - 1, hh - 1); }
          ctx.font = t.bold;
          const txt = [showMb && s.mb >= 0 ? letter + s.mb : null, letter].find((x) => x && ctx.measureText(x).width + 4 <= w);
          if (txt) haloText(ctx, txt, x0 + w / 2, yy + hh / 2, 'center', t.bold);
          hits.push({ x: x0, y: yy, w, h: hh, span: s, work: l.work });
        }
        // The waits, dotted on the compute lane: over the compute they interrupt, and where the
        // rank waited outside any (a blocking call between passes).
        for (const w of merged(spans.map(waitOf).filter((x) => x))) {
          const x0 = X(w[0]), ww = Math.max(1, X(w[1]) - x0), yy = y + 2, hh = laneH - 4;
          ctx.fillStyle = fill('dots', t.c.wait || t.bg);
          ctx.fillRect(x0, yy, ww, hh);
          waited = true;
          hits.unshift({ x: x0, y: yy, w: ww, h: hh, span: { name: 'waiting for communication', rank: spans[0].rank,
            mb: -1, layer: -1, t0_us: w[0], t1_us: w[1] } });
        }
        if (!spans.length) {
          ctx.fillStyle = t.muted; ctx.font = t.font; ctx.textAlign = 'left';
          ctx.fillText('(no spans for this step yet)', padL + 6, y + laneH);
        }
        const busy = length(l.all) / (b - a), hidden = l.comm.length ? overlap(l.work, l.comm) / length(l.comm) : -1;
        ctx.font = t.font; ctx.fillStyle = t.fg; ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
        ctx.fillText((narrow ? '' : 'busy ') + Math.round(100 * busy) + '%', padL + pw + 8, y + laneH / 2);
        if (hidden >= 0) ctx.fillText(Math.round(100 * hidden) + (narrow ? '% hid' : '% hidden'), padL + pw + 8, y + laneH * 1.5);
        said.push('rank ' + r + ' busy ' + Math.round(100 * busy) + '%' +
          (hidden >= 0 ? ', ' + Math.round(100 * hidden) + '% of its communication hidden' : ''));
      });
      canvas.setAttribute('aria-label', 'Timeline of step ' + d.step + ', ' + fmt(ms, 2) + ' ms: ' + said.join('; '));

      // The legend lists the kinds this step has, in the table's order.
      const present = new Set();
      rows.forEach((sp) => sp.forEach((s) => present.add(spanKind(s))));
      if (waited) present.add('wait');
      setLegend(leg, Object.keys(KINDS).filter((k) => present.has(k))
        .map((k) => ({ pattern: KINDS[k].pattern, colour: KINDS[k].colour, letter: KINDS[k].letter, label: KINDS[k].label })));
      const text = (narrow ? 'The right column: busy, and hidden. ' : '') +
        'busy: the part of the step the rank worked; hidden: the part of its communication that overlapped its compute' +
        (waited ? '; dotted: the rank waited for communication, so that time is not compute, even inside a compute span' : '') +
        (showMb ? '; the number after a letter is the micro-batch' : '') + '. Hover a bar for its details.';
      if (note.textContent !== text) note.textContent = text;
    }
    return { draw, redraw: () => { if (last) draw(last); } };
  }

  return { Timeline, commOf };
})();
