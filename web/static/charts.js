// charts.js — how a run's dashboard draws: the loss chart, the per-rank bar charts and the
// collectives' bus bandwidth (with Chart.js), and what they share with the timeline
// (timeline.js, on a canvas of its own): colours, hatch patterns, text that stays legible on
// any fill, legends. run.js decides what to show and loads this file; nothing here knows
// about the stream or the run's state.
//
// Readable without colour: lines differ by dash and marker, bar segments by hatching and by
// their printed names, timeline bars by a letter. Under forced colours (high contrast) the
// canvases, which the system does not recolour, are drawn in its two colours only, so those
// cues are all that is left: the proof that they suffice.
'use strict';

window.ShardlabCharts = (function () {
  const MiB = 1048576;

  // run.js loads this file, and lends it its DOM helper (one copy of it).
  const el = window.ShardlabDom.el;
  const fmt = (v, d) => (typeof v === 'number' && isFinite(v) ? v.toFixed(d) : '\u2013');
  const fmtMiB = (b) => { const m = b / MiB; return m.toFixed(m >= 100 ? 0 : m >= 10 ? 1 : 2); };
  const fmtMs = (ms) => ms.toFixed(ms >= 100 ? 0 : ms >= 10 ? 1 : 2);

  // ================================================================ theme and patterns

  // Colours come from app.css (light or dark), by name: a series says "compute" and gets
  // --c-compute. Under forced colours every series is the system's text colour.
  let th = null;
  const patterns = new Map();

  function theme() {
    if (th) return th;
    const cs = getComputedStyle(document.documentElement);
    const v = (name) => cs.getPropertyValue(name).trim();
    const forced = window.matchMedia('(forced-colors: active)').matches;
    const t = { forced, fg: v('--fg'), bg: v('--panel'), muted: v('--muted'), grid: v('--c-grid'), hatch: v('--c-hatch'), c: {} };
    for (const k of ['loss', 'ref', 'floor', 'compute', 'comm', 'other', 'params', 'grads', 'optim', 'acts',
      'commbuf', 'host', 'fwd', 'bwd', 'recompute', 'optim-span', 'coll', 'send', 'recv', 'across', 'kv', 'wait']) t.c[k] = v('--c-' + k);
    if (forced) {
      // getComputedStyle resolves system colour keywords to the colours actually in use.
      const probe = el('span', { style: 'color:CanvasText;background-color:Canvas;forced-color-adjust:none' });
      document.body.append(probe);
      const ps = getComputedStyle(probe);
      t.fg = ps.color; t.bg = ps.backgroundColor; t.muted = t.fg; t.hatch = t.bg;
      t.grid = t.fg.replace(/^rgb\((.*)\)$/, 'rgba($1, 0.3)');  // faint, so the data stays in front
      probe.remove();
      for (const k of Object.keys(t.c)) t.c[k] = t.fg;
    }
    const family = getComputedStyle(document.body).fontFamily || 'sans-serif';
    t.font = '12px ' + family;
    t.bold = 'bold 12px ' + family;
    th = t;
    return t;
  }

  // After a change of colour scheme: the next drawing reads the colours again.
  function retheme() {
    th = null;
    patterns.clear();
  }

  // A fill for a bar: the series colour, hatched so that it reads in grey too. Under forced
  // colours 'solid' is the text colour and the others are its lines on the background.
  function fill(kind, colourName) {
    const t = theme();
    const colour = t.c[colourName] || colourName;
    const base = t.forced ? (kind === 'solid' ? t.fg : t.bg) : colour;
    const ink = t.forced ? t.fg : t.hatch;
    const key = kind + '|' + base + '|' + ink;
    if (patterns.has(key)) return patterns.get(key);
    const s = 8, c = el('canvas', { width: s, height: s }), g = c.getContext('2d');
    g.fillStyle = base; g.fillRect(0, 0, s, s);
    g.strokeStyle = ink; g.fillStyle = ink; g.lineWidth = 1.4;
    const line = (x0, y0, x1, y1) => { g.beginPath(); g.moveTo(x0, y0); g.lineTo(x1, y1); g.stroke(); };
    // Three parallel strokes per tile, so the lines run on across tile edges.
    const diag = () => { line(0, s, s, 0); line(-s, s, s, -s); line(0, 2 * s, 2 * s, 0); };
    const back = () => { line(0, 0, s, s); line(-s, 0, s, 2 * s); line(0, -s, 2 * s, s); };
    if (kind === 'diag') diag();
    else if (kind === 'back') back();
    else if (kind === 'cross') { diag(); back(); }
    else if (kind === 'horiz') line(0, s / 2, s, s / 2);
    else if (kind === 'vert') line(s / 2, 0, s / 2, s);
    else if (kind === 'dots') { g.beginPath(); g.arc(2, 2, 1.3, 0, 7); g.arc(6, 6, 1.3, 0, 7); g.fill(); }
    const p = g.createPattern(c, 'repeat');
    patterns.set(key, p);
    return p;
  }

  // Text with a halo of the background colour: legible on any fill, hatched or not.
  function haloText(ctx, text, x, y, align, font) {
    const t = theme();
    ctx.save();
    ctx.font = font || t.font;
    ctx.textAlign = align || 'center';
    ctx.textBaseline = 'middle';
    ctx.lineJoin = 'round';
    ctx.lineWidth = 3.5;
    ctx.strokeStyle = t.bg;
    ctx.strokeText(text, x, y);
    ctx.fillStyle = t.fg;
    ctx.fillText(text, x, y);
    ctx.restore();
  }

  // A canvas sized for the screen's pixel density, drawn on in CSS pixels.
  function hidpi(canvas, w, h) {
    const r = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * r); canvas.height = Math.round(h * r);
    canvas.style.width = w + 'px'; canvas.style.height = h + 'px';
    const ctx = canvas.getContext('2d');
    ctx.setTransform(r, 0, 0, r, 0, 0);
    return ctx;
  }

  // The legend's sample of a Chart.js point style (circle, triangle, rect, rectRot, crossRot).
  function marker(g, style, x, y, r, colour) {
    g.fillStyle = colour; g.strokeStyle = colour; g.beginPath();
    if (style === 'crossRot') {
      g.lineWidth = 2;
      g.moveTo(x - r * 0.8, y - r * 0.8); g.lineTo(x + r * 0.8, y + r * 0.8);
      g.moveTo(x + r * 0.8, y - r * 0.8); g.lineTo(x - r * 0.8, y + r * 0.8);
      g.stroke();
      return;
    }
    if (style === 'triangle') { g.moveTo(x, y - r); g.lineTo(x + r, y + r * 0.8); g.lineTo(x - r, y + r * 0.8); g.closePath(); }
    else if (style === 'rect') g.rect(x - r * 0.75, y - r * 0.75, r * 1.5, r * 1.5);
    else if (style === 'rectRot') { g.moveTo(x, y - r); g.lineTo(x + r, y); g.lineTo(x, y + r); g.lineTo(x - r, y); g.closePath(); }
    else g.arc(x, y, r * 0.85, 0, 7);
    g.fill();
  }

  // Legends are HTML (text a screen reader reads, that wraps on a phone) with a drawn sample:
  // a line with its dash and marker, or a patch of the bar's fill with its letter.
  // items: [{label, line: true, colour, dash, point}] or [{label, pattern, colour, letter}].
  function legend(items) {
    const t = theme();
    const ul = el('ul', { class: 'legend' });
    for (const it of items) {
      const sw = el('canvas', { 'aria-hidden': 'true' });
      const g = hidpi(sw, 30, 16);
      g.fillStyle = t.bg; g.fillRect(0, 0, 30, 16);
      if (it.line) {
        const colour = t.c[it.colour];
        g.strokeStyle = colour; g.lineWidth = 2; g.setLineDash(it.dash || []);
        g.beginPath(); g.moveTo(1, 8); g.lineTo(29, 8); g.stroke(); g.setLineDash([]);
        if (it.point) marker(g, it.point, 15, 8, 4, colour);
      } else {
        g.fillStyle = fill(it.pattern, it.colour); g.fillRect(0, 0, 30, 16);
        if (it.letter) haloText(g, it.letter, 15, 8, 'center', t.bold);
      }
      ul.append(el('li', null, sw, it.label));
    }
    return ul;
  }

  // Rebuilding a legend on every redraw would flicker and re-announce it: only on change.
  function setLegend(holder, items) {
    const key = JSON.stringify(items) + theme().fg;
    if (holder.dataset.key === key) return;
    holder.dataset.key = key;
    holder.replaceChildren(legend(items));
  }

  // ================================================================ Chart.js charts

  function baseOptions() {
    return {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
      plugins: { legend: { display: false } },
    };
  }

  function setDefaults() {
    const t = theme();
    window.Chart.defaults.color = t.fg;
    window.Chart.defaults.borderColor = t.grid;
    window.Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  }

  // The chart and everything added under it go into one <div>, so that destroy() can take
  // them all away (a new colour scheme, or a new number of ranks, builds them again).
  function chartBox(panel, height) {
    const canvas = el('canvas', { role: 'img' });
    const wrap = el('div', null, el('div', { class: 'chart-box', style: 'height:' + height + 'px' }, canvas));
    panel.s.append(wrap);
    return { canvas, wrap };
  }

  // The collectives lab's figure: bus bandwidth against message size, a line per collective
  // (each its colour and marker), and a ceiling dashed across (the machine's memory-copy rate
  // on the shm backend). The legend and the words on the ceiling sit beside the chart, in
  // HTML; the numbers follow as a table. run_collectives.js says what to draw.
  const BUSBW_STYLE = {
    all_reduce: { colour: 'coll', point: 'circle' },
    reduce_scatter: { colour: 'commbuf', point: 'triangle' },
    all_gather: { colour: 'params', point: 'rect' },
    broadcast: { colour: 'optim', point: 'rectRot' },
    reduce: { colour: 'send', point: 'crossRot' },
    all_to_all: { colour: 'kv', point: 'star' },
  };
  const OTHER_STYLES = [{ colour: 'recv', point: 'circle' }, { colour: 'host', point: 'triangle' }];
  const CEILING = { colour: 'floor', dash: [9, 5], point: null };

  // "4 B", "64 KiB", "16 MiB": a message size in the units the lab's options take.
  function fmtBytes(b) {
    const units = ['B', 'KiB', 'MiB', 'GiB'];
    let u = 0;
    while (b >= 1024 && u < units.length - 1) b /= 1024, u++;
    return (Number.isInteger(b) ? String(b) : b.toFixed(b >= 10 ? 0 : 1)) + ' ' + units[u];
  }

  // Ticks at powers of two, from the smallest size to the largest, evenly spaced and at most 8
  // (4 B, 64 B, 1 KiB, ... 64 MiB): the doublings the lab steps through, both ends named.
  function pow2Ticks(axis) {
    const lo = Math.ceil(Math.log2(axis.min)), hi = Math.floor(Math.log2(axis.max)), span = hi - lo;
    if (!(span >= 0)) return;  // no sizes yet: Chart.js's own ticks
    let step = 1;
    while (span / step > 7 || (span % step && step < span)) step++;
    if (span / step < 3 && span > 7) step = Math.ceil(span / 6);  // a prime span: even steps, and the end
    const ticks = [];
    for (let k = lo; k <= hi; k += step) ticks.push({ value: 2 ** k });
    if (span > 0 && ticks[ticks.length - 1].value !== 2 ** hi) ticks.push({ value: 2 ** hi });
    axis.ticks = ticks;
  }

  // panel: {s}; words: {ceilingName, ceilingLabel(gbps), ceilingNote, noCeiling}.
  function BusbwChart(panel, words) {
    setDefaults();
    const t = theme();
    const canvas = el('canvas', { role: 'img' });
    const leg = el('div', { class: 'busbw-legend' }), note = el('p', { class: 'busbw-note' });
    const table = el('details', { class: 'data' });
    const wrap = el('div', null,
      el('figure', { class: 'busbw' }, el('div', { class: 'chart-box busbw-box' }, canvas), el('figcaption', null, leg, note)), table);
    panel.s.append(wrap);
    const styles = new Map();
    const styleOf = (coll) => {
      if (!styles.has(coll)) styles.set(coll, BUSBW_STYLE[coll] || OTHER_STYLES[styles.size % OTHER_STYLES.length]);
      return styles.get(coll);
    };
    const chart = new window.Chart(canvas, {
      type: 'line',
      data: { datasets: [] },
      options: Object.assign(baseOptions(), {
        interaction: { mode: 'nearest', intersect: false },
        plugins: {
          legend: { display: false },
          tooltip: {
            callbacks: {
              title: (items) => (items.length ? fmtBytes(items[0].raw.x) : ''),
              label: (c) => c.dataset.label + ': ' + fmt(c.raw.y, 2) + ' GB/s' + (c.raw.algo ? ' (' + c.raw.algo + ')' : ''),
            },
          },
        },
        scales: {
          x: { type: 'logarithmic', title: { display: true, text: 'message size' }, afterBuildTicks: pow2Ticks,
            ticks: { callback: (v) => fmtBytes(v), autoSkip: true, maxRotation: 0 } },
          y: { beginAtZero: true, title: { display: true, text: 'bus bandwidth (GB/s)' } },
        },
      }),
    });

    // d: {series: [{coll, label, points: [{x: bytes, y: GB/s, algo?, row?}]}], ceiling: GB/s or 0,
    //     rows: the measurements for the table ([{cells}]), head: the table's column names}
    function update(d) {
      const sets = d.series.map((s) => {
        const st = styleOf(s.coll), colour = t.c[st.colour];
        return { label: s.label, data: s.points.slice().sort((a, b) => a.x - b.x), borderColor: colour, backgroundColor: colour,
          borderWidth: 2, pointRadius: 3.5, pointStyle: st.point };
      });
      const xs = d.series.flatMap((s) => s.points.map((p) => p.x));
      if (d.ceiling > 0 && xs.length)
        sets.push({ label: words.ceilingName, data: [{ x: Math.min(...xs), y: d.ceiling }, { x: Math.max(...xs), y: d.ceiling }],
          borderColor: t.c[CEILING.colour], backgroundColor: t.c[CEILING.colour], borderDash: CEILING.dash, borderWidth: 2, pointRadius: 0 });
      chart.data.datasets = sets;
      // The axis from the smallest size measured to the largest (a log axis would start at 1).
      chart.options.scales.x.min = xs.length ? Math.min(...xs) : undefined;
      chart.options.scales.x.max = xs.length ? Math.max(...xs) : undefined;
      chart.update('none');
      const items = d.series.map((s) => Object.assign({ line: true, label: s.label, colour: styleOf(s.coll).colour, point: styleOf(s.coll).point }));
      if (d.ceiling > 0) items.push(Object.assign({ line: true, label: words.ceilingLabel(d.ceiling) }, CEILING));
      setLegend(leg, items);
      const text = d.ceiling > 0 ? words.ceilingNote : words.noCeiling;
      if (note.textContent !== text) note.textContent = text;
      note.hidden = !text;
      canvas.setAttribute('aria-label', 'Bus bandwidth against message size: ' + d.series.map((s) => s.label + ' up to ' +
        fmt(Math.max(...s.points.map((p) => p.y)), 2) + ' GB/s').join('; ') + (d.ceiling > 0 ? '; ' + words.ceilingLabel(d.ceiling) : ''));
      if (d.rows && d.rows.length) {
        const open = table.open;
        table.replaceChildren(el('summary', { text: 'the measurements, as a table (' + d.rows.length + ' rows)' }),
          el('table', { class: 'data' }, el('thead', null, el('tr', null, ...d.head.map((h) => el('th', { class: h.num ? 'num' : null, text: h.text })))),
            el('tbody', null, ...d.rows.map((r) => el('tr', null, ...r.map((v, i) => el('td', { class: d.head[i].num ? 'num' : null, text: v })))))));
        table.open = open;
      }
      table.hidden = !(d.rows && d.rows.length);
    }
    return { update, destroy: () => { chart.destroy(); wrap.remove(); } };
  }

  // (1) Loss: rank 0's curve, the reference run's and the floor. Markers every few points,
  // so the lines differ even where they lie on each other.
  const LOSS = { colour: 'loss', dash: [], point: 'circle' };
  const REF = { colour: 'ref', dash: [2, 3], point: 'triangle' };
  const FLOOR = { colour: 'floor', dash: [9, 5], point: null };

  function LossChart(panel) {
    setDefaults();
    const t = theme();
    const { canvas, wrap } = chartBox(panel, 300);
    const every = (ctx) => Math.max(1, Math.ceil(ctx.dataset.data.length / 14));
    // The reference is drawn over the loss (order 0): where the two curves agree, as the
    // graders expect them to, the dotted line lies on the solid one and both stay visible;
    // its markers sit half a period later, so that they do not hide under the loss's.
    const ds = (s, label, order) => ({
      label, data: [], order, borderColor: t.c[s.colour], backgroundColor: t.c[s.colour], borderWidth: 2,
      borderDash: s.dash, pointStyle: s.point || 'circle', pointHoverRadius: 4,
      pointRadius: s.point ? (ctx) => ((ctx.dataIndex + (s === REF ? Math.floor(every(ctx) / 2) : 0)) % every(ctx) === 0 ? 3.5 : 0) : 0,
    });
    const chart = new window.Chart(canvas, {
      type: 'line',
      data: { datasets: [ds(LOSS, 'loss', 1), ds(REF, 'reference', 0), ds(FLOOR, 'loss floor', 2)] },
      options: Object.assign(baseOptions(), {
        interaction: { mode: 'nearest', axis: 'x', intersect: false },
        scales: {
          x: { type: 'linear', min: 1, title: { display: true, text: 'step' }, ticks: { precision: 0 } },
          y: { title: { display: true, text: 'loss (nats/token)' } },
        },
      }),
    });
    const leg = el('div');
    wrap.append(leg);

    // d: {loss: [{x, y}], ref: [{x, y}] or null, refName, refNote, floor (number or null), maxX}
    function update(d) {
      const ref = d.ref || [];
      chart.options.scales.x.max = d.maxX;
      chart.data.datasets[0].data = d.loss;
      chart.data.datasets[1].data = ref;
      chart.data.datasets[2].data = d.floor == null ? [] : [{ x: 1, y: d.floor }, { x: d.maxX, y: d.floor }];
      chart.update('none');
      const last = d.loss[d.loss.length - 1];
      const items = [Object.assign({ line: true, label: 'loss, rank 0' + (last ? ' (now ' + fmt(last.y, 4) + ' at step ' + last.x + ')' : '') }, LOSS)];
      // The reference at this run's latest step, and how far apart the two are there: a
      // method that matches the single-rank run keeps the gap near zero.
      const same = last ? ref.find((p) => p.x === last.x) : null;
      const diff = same ? last.y - same.y : 0;
      const gap = same ? ' (' + fmt(same.y, 4) + ' at step ' + same.x + '; ' + (diff === 0 ? 'the same loss as this run, to every digit logged'
        : 'this run minus it: ' + (diff > 0 ? '+' : '\u2212') + Math.abs(diff).toExponential(1)) + ')' : '';
      if (d.refName) items.push(Object.assign({ line: true, label: 'reference run ' + d.refName + (d.refNote ? ' (' + d.refNote + ')' : gap) }, REF));
      items.push(Object.assign({ line: true, label: d.floor == null ? 'no loss floor (file data: its entropy is unknown)'
        : 'loss floor, the data\u2019s entropy: ' + fmt(d.floor, 4) }, FLOOR));
      setLegend(leg, items);
      canvas.setAttribute('aria-label', 'Loss curve: ' + (last ? 'step ' + last.x + ', loss ' + fmt(last.y, 4) : 'no steps yet') +
        (ref.length ? '; reference run ' + d.refName + ', ' + ref.length + ' steps' + (same ? ', ' + fmt(same.y, 4) + ' at step ' + same.x : '') : '') +
        (d.floor != null ? '; floor ' + fmt(d.floor, 4) : ''));
    }
    return { update, destroy: () => { chart.destroy(); wrap.remove(); } };
  }

  // (2), (3) Horizontal stacked bars, one bar per rank and a segment per part; a segment
  // prints its name and value, or its letter and value, or its letter, whichever fits.
  // unit: {name, fmt}; parts: [{key, label, short, letter, colour, pattern}].
  function BarChart(panel, unit, world) {
    setDefaults();
    const t = theme();
    const { canvas, wrap } = chartBox(panel, 56 + 44 * world);
    let cur = { parts: [], marks: [], totals: [] };
    const labels = {
      id: 'shardlabBarLabels',
      afterDatasetsDraw(chart) {
        const ctx = chart.ctx, xs = chart.scales.x;
        const metas = chart.data.datasets.map((_, i) => chart.getDatasetMeta(i));
        metas.forEach((meta, i) => meta.data.forEach((bar, j) => {
          const v = chart.data.datasets[i].data[j];
          if (!v) return;
          const { x, base, y } = bar.getProps(['x', 'base', 'y'], true);
          const room = Math.abs(x - base) - 6, p = cur.parts[i], num = unit.fmt(v);
          ctx.font = t.font;
          const text = [p.short + ' ' + num, p.letter + ' ' + num, p.letter].find((s) => ctx.measureText(s).width <= room);
          if (text) haloText(ctx, text, (x + base) / 2, y);
        }));
        if (!metas.length) return;
        // Beyond the stack: the marks (the memory peak, a dashed tick) and the bar's total.
        metas[0].data.forEach((bar0, j) => {
          const { y, height } = bar0.getProps(['y', 'height'], true);
          const end = metas.reduce((m, meta) => Math.max(m, meta.data[j] ? meta.data[j].getProps(['x'], true).x : 0), xs.left);
          const marks = cur.marks[j] || [];
          for (const mk of marks) {
            const px = xs.getPixelForValue(mk.x);
            ctx.save();
            ctx.strokeStyle = t.fg; ctx.lineWidth = 2; ctx.setLineDash([4, 2]);
            ctx.beginPath(); ctx.moveTo(px, y - height / 2 - 4); ctx.lineTo(px, y + height / 2 + 4); ctx.stroke();
            ctx.restore();
            haloText(ctx, mk.text, px + 4, y - height / 2 + 1, 'left');
          }
          if (cur.totals[j]) haloText(ctx, cur.totals[j], end + 4, y + (marks.length ? height / 4 : 0), 'left');
        });
      },
    };
    const chart = new window.Chart(canvas, {
      type: 'bar',
      data: { labels: [], datasets: [] },
      options: Object.assign(baseOptions(), {
        indexAxis: 'y',
        parsing: true,
        scales: {
          x: { stacked: true, beginAtZero: true, grace: '16%', title: { display: true, text: unit.name } },
          y: { stacked: true },
        },
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: { label: (c) => c.dataset.label + ': ' + unit.fmt(c.raw) + ' ' + unit.name } },
        },
      }),
      plugins: [labels],
    });
    const leg = el('div'), table = el('details', { class: 'data' });
    wrap.append(leg, table);

    // d: {parts, values: [rank][part] in the unit, steps: [rank], marks: [rank][{x, text}],
    //     totals: [rank] text or null, title (for the canvas's description)}
    function update(d) {
      cur = d;
      const ranks = d.values.map((_, r) => r);
      chart.data.labels = ranks.map((r) => 'rank ' + r);
      chart.data.datasets = d.parts.map((p, i) => ({
        label: p.label, data: ranks.map((r) => d.values[r][i]),
        backgroundColor: fill(p.pattern, p.colour), borderColor: t.fg, borderWidth: 1,
        barPercentage: 0.85, categoryPercentage: 0.9,
      }));
      const peak = Math.max(0, ...d.marks.flat().map((m) => m.x));
      chart.options.scales.x.suggestedMax = peak ? peak * 1.2 : undefined;  // room for the caption
      chart.update('none');
      // The legend shows each part's letter on its fill, as a narrow segment prints it.
      setLegend(leg, d.parts.map((p) => ({ pattern: p.pattern, colour: p.colour, letter: p.letter, label: p.label })));
      // The same numbers as a table, for screen readers and for copying.
      const withMarks = d.marks.some((m) => m.length);
      const head = el('tr', null, el('th', { text: 'rank' }), el('th', { text: 'step' }),
        ...d.parts.map((p) => el('th', { class: 'num', text: p.short })), ...(withMarks ? [el('th', { class: 'num', text: 'peak' })] : []));
      const rows = ranks.map((r) => el('tr', null, el('td', { text: String(r) }), el('td', { text: d.steps[r] == null ? '' : String(d.steps[r]) }),
        ...d.values[r].map((v) => el('td', { class: 'num', text: unit.fmt(v) })),
        ...(withMarks ? [el('td', { class: 'num', text: (d.marks[r] || []).map((m) => unit.fmt(m.x)).join(' ') })] : [])));
      const open = table.open;
      table.replaceChildren(el('summary', { text: 'the numbers, as a table (' + unit.name + ')' }),
        el('table', { class: 'data' }, el('thead', null, head), el('tbody', null, ...rows)));
      table.open = open;
      canvas.setAttribute('aria-label', d.title + ': ' + ranks.map((r) => 'rank ' + r + ' ' +
        d.parts.map((p, i) => p.short + ' ' + unit.fmt(d.values[r][i])).join(', ')).join('; ') + ' ' + unit.name);
    }
    return { update, world, destroy: () => { chart.destroy(); wrap.remove(); } };
  }

  // (timeline.js draws the timeline with fill, haloText, hidpi and setLegend.)
  return { MiB, fmt, fmtMiB, fmtMs, fmtBytes, theme, retheme, fill, haloText, hidpi, setLegend, LossChart, BarChart, BusbwChart };
})();
