// run_collectives.js — the run page of the collectives lab (labs/03-collectives/collectives.c), which trains
// nothing: it times and checks every collective over a range of message sizes, nccl-tests
// style. Its page has no loss, step time, memory or timeline panels. Its main figure is the
// bus bandwidth by message size: rank 0's measurements as they come, then summary.json's
// table with the memcpy ceiling. Its summary, checks and grade are said in its own words.
// run.js loads this file and calls it for a lab whose run description says "trains": false.
'use strict';

window.ShardlabCollectives = function ({ S, plural }) {
  // A size in words; anything else a run's files hold, as it is (they are untrusted).
  const bytes = (b) => (!(typeof b === 'number' && isFinite(b) && b >= 0) ? String(b)
    : window.ShardlabCharts ? window.ShardlabCharts.fmtBytes(b) : b + ' B');

  // The collectives in words, in the lab's order (DistColl 0..5).
  const NAMES = { all_reduce: 'all-reduce', reduce_scatter: 'reduce-scatter', all_gather: 'all-gather', broadcast: 'broadcast',
    reduce: 'reduce', all_to_all: 'all-to-all' };
  const ORDER = Object.keys(NAMES);
  const name = (c) => NAMES[c] || String(c).replace(/_/g, '-');
  const byOrder = (a, b) => (ORDER.indexOf(a) + 1 || 99) - (ORDER.indexOf(b) + 1 || 99);

  // The ceiling and why points may pass it. tui/busbwplot.c draws the same words, and the
  // browser test holds the two to each other. Why: busbw counts each byte a rank's link
  // carries once (nccl-tests' factors), while through shared memory a byte is copied twice,
  // into a channel by its sender and out by its receiver, each on its own core, and the
  // channel's 256 KiB pieces stay in the caches. A ring rank sends and receives every byte
  // busbw counts, so its core does both copies, as much as a memcpy; at either end of the
  // broadcast and reduce chains a rank only sends or only receives, half of that.
  const WORDS = {
    ceilingName: 'memcpy ceiling',
    ceilingLabel: (g) => 'memcpy ceiling, ' + g.toFixed(2) + ' GB/s: one core copying a buffer larger than its caches',
    ceilingNote: 'Points can pass it: shared memory splits each byte\u2019s copy between its sender and its receiver, ' +
      'on two cores at once through the caches, and at either end of a broadcast\u2019s or reduce\u2019s chain a rank ' +
      'does only one half, where every rank of the other collectives does both.',
    noCeiling: '',
  };

  // How many rows the lab will measure: each collective at each size from min_bytes to
  // max_bytes, times factor a step, in whole floats (1, 2 and 3 bytes are one float: one row).
  function planned(config) {
    const c = config || {}, colls = Array.isArray(c.colls) ? c.colls.length : 0;
    if (!colls || !(c.min_bytes >= 1) || !(c.max_bytes >= c.min_bytes) || !(c.factor >= 2)) return { rows: 0, sizes: 0 };
    let sizes = 0, last = 0;
    for (let b = c.min_bytes; b <= c.max_bytes && sizes < 100; b *= c.factor) {
      const n = Math.max(1, Math.floor(b / 4));
      if (n !== last) sizes++, last = n;
    }
    return { rows: colls * sizes, sizes };
  }

  // The status line's progress: measurements, not steps.
  function progress(config) {
    const total = planned(config).rows;
    return { done: S.measured, total, text: total ? S.measured + ' of ' + plural(total, 'measurement') : plural(S.measured, 'measurement') };
  }

  // ================================================================ the figure

  const TABLE_HEAD = [{ text: 'collective' }, { text: 'size' }, { text: 'floats', num: true }, { text: 'time per call (\u00b5s)', num: true },
    { text: 'algbw (GB/s)', num: true }, { text: 'busbw (GB/s)', num: true }, { text: '#wrong', num: true }, { text: 'algorithm' }];

  // summary.json's rows when the run has them (with the algorithm and the time), else rank
  // 0's checks as they arrive.
  function figure(sum) {
    const rows = sum && Array.isArray(sum.rows) ? sum.rows.filter((r) => r && r.size > 0 && typeof r.busbw === 'number') : [];
    const by = new Map();
    if (rows.length) {
      for (const r of rows) {
        if (!by.has(r.coll)) by.set(r.coll, []);
        by.get(r.coll).push({ x: r.size, y: r.busbw, algo: typeof r.algo === 'string' ? r.algo : '' });
      }
    } else {
      for (const [coll, pts] of S.busbw) by.set(coll, pts.filter((p) => p.x > 0));
    }
    const series = Array.from(by.keys()).sort(byOrder).map((coll) => ({ coll, label: name(coll), points: by.get(coll) }))
      .filter((s) => s.points.length);
    const num = (v, d) => (typeof v === 'number' && isFinite(v) ? v.toFixed(d) : '\u2013');
    const table = rows.map((r) => [name(r.coll), bytes(r.size), String(r.count), num(r.time_us, 2), num(r.algbw, 2), num(r.busbw, 2),
      r.wrong === null ? 'not checked' : String(r.wrong), String(r.algo || '')]);
    return { series, ceiling: sum && typeof sum.memcpy_gbps === 'number' ? sum.memcpy_gbps : 0, rows: table, head: TABLE_HEAD };
  }

  function figureNote(sum, config) {
    if (!S.measured && !(sum && Array.isArray(sum.rows) && sum.rows.length))
      return S.final ? 'the run ended before its first measurement' : 'waiting for the first measurement ...';
    const p = planned(config);
    return 'Rank 0\u2019s measurements' + (S.final ? '' : ' so far, ' + S.measured + ' of ' + (p.rows || '?')) +
      '. busbw = algbw \u00d7 the collective\u2019s factor, as nccl-tests reports it. Small messages are latency-bound ' +
      '(left), large ones bandwidth-bound (right).';
  }

  // ================================================================ the summary in words

  // "direct for 4 B to 64 KiB; ring for 128 KiB to 64 MiB (all-reduce, reduce-scatter,
  // all-gather)": what dist chose, read from the rows' algo column.
  function algorithms(rows, config) {
    const by = new Map();
    for (const r of rows) {
      const a = String(r.algo || '?');
      const e = by.get(a) || { lo: Infinity, hi: 0, colls: new Set() };
      e.lo = Math.min(e.lo, r.size), e.hi = Math.max(e.hi, r.size), e.colls.add(r.coll);
      by.set(a, e);
    }
    const all = new Set(rows.map((r) => r.coll)).size;
    const parts = Array.from(by, ([a, e]) => a + ' for ' + (e.lo === e.hi ? bytes(e.lo) : bytes(e.lo) + ' to ' + bytes(e.hi)) +
      (e.colls.size === all ? '' : ' (' + Array.from(e.colls).sort(byOrder).map(name).join(', ') + ')'));
    const asked = config && typeof config.algo === 'string' ? '--algo ' + config.algo + ': ' : '';
    return asked + parts.join('; ');
  }

  // The summary's rows: [key, value, label]; the key is each row's tooltip, to read summary.json by.
  function summaryPairs(sum, config) {
    const c = config || {}, rows = Array.isArray(sum.rows) ? sum.rows.filter((r) => r && typeof r === 'object') : [];
    const colls = Array.from(new Set(rows.map((r) => r.coll))).sort(byOrder);
    const sizes = Array.from(new Set(rows.map((r) => r.size))).sort((a, b) => a - b);
    const pairs = [['status', sum.status, 'status']];
    pairs.push(['config.colls', colls.length ? colls.map(name).join(', ') : 'none measured', 'collectives']);
    if (sizes.length)
      pairs.push(['rows[].size', bytes(sizes[0]) + ' to ' + bytes(sizes[sizes.length - 1]) + (c.factor ? ', \u00d7' + c.factor + ' a step' : '') +
        ': ' + plural(sizes.length, 'size'), 'message sizes']);
    pairs.push(['steps', plural(rows.length, 'measurement') + (colls.length && sizes.length ? ' (' + colls.length + ' \u00d7 ' + sizes.length + ')' : ''),
      'measured']);
    pairs.push(['world_size', plural(sum.world_size, 'rank'), 'ranks']);
    if (rows.length) pairs.push(['rows[].algo', algorithms(rows, c), 'algorithm']);
    if (c.iters > 0) pairs.push(['config.iters', c.iters + ' per measurement, after ' + plural(c.warmup || 0, 'warm-up call') +
      '; the time is the slowest rank\u2019s mean', 'timed calls']);
    pairs.push(['wrong', c.check === 0 ? 'not checked (--check 0)' : typeof sum.wrong === 'number'
      ? sum.wrong + ' wrong element' + (sum.wrong === 1 ? '' : 's') + ', every result checked on every rank against a serial computation'
      : 'unknown', 'wrong elements (#wrong)']);
    if (typeof sum.avg_busbw === 'number') pairs.push(['avg_busbw', sum.avg_busbw.toFixed(2) + ' GB/s, over all ' + plural(rows.length, 'measurement'),
      'mean bus bandwidth']);
    pairs.push(['memcpy_gbps', typeof sum.memcpy_gbps === 'number' ? WORDS.ceilingLabel(sum.memcpy_gbps).replace(/^memcpy ceiling, /, '')
      : 'none: on a GPU the devices and their links set the limit', 'memcpy ceiling']);
    if (sum.run_dir) pairs.push(['run_dir', sum.run_dir, 'run directory']);
    return pairs;
  }

  // ================================================================ checks and grade

  // <collective>.<bytes>.wrong and .busbw, in words.
  function checkLabel(check) {
    const m = /^([a-z_]+)\.(\d+)\.(wrong|busbw)$/.exec(check);
    if (!m) return check;
    return name(m[1]) + ' of ' + bytes(Number(m[2])) + ': ' + (m[3] === 'wrong' ? 'every element right (#wrong = 0)'
      : 'busbw = algbw \u00d7 its factor');
  }

  // A check's value and expectation with its unit: GB/s for the bus bandwidth, elements for #wrong.
  function checkValue(check, v) {
    if (typeof v !== 'number' || !isFinite(v)) return JSON.stringify(v);
    if (/\.busbw$/.test(check)) return +v.toPrecision(3) + ' GB/s';
    if (/\.wrong$/.test(check)) return v + ' wrong';
    return String(+v.toPrecision(6));
  }

  const gradeNote = 'the lab\u2019s rubric, checked on this run\u2019s logs: run.complete, every rank ended ok; ' +
    'collectives.correct, #wrong = 0 on every row of every collective run, on every rank. Each rank compared its ' +
    'result with a serial computation, on data where a chunk in the wrong place changes a value, so no reference run is needed.';
  const grading = 'grading\u2026 the grader reads every rank\u2019s log';

  // Config keys in words, for the run's configuration (meta.json).
  const CONFIG_WORDS = {
    min_bytes: ['smallest message', bytes], max_bytes: ['largest message', bytes], factor: ['size step (\u00d7)'],
    iters: ['timed calls per measurement'], warmup: ['warm-up calls per measurement'], check: ['results checked (1) or not (0)'],
    algo: ['algorithm asked for (--algo)'], direct_max_bytes: ['direct (one-step) algorithm up to', bytes],
    colls: ['collectives', (v) => (Array.isArray(v) ? v.map(name).join(', ') : String(v))],
  };

  // What the run's Perfetto file holds (the link under the page).
  const traceNote = 'every rank\u2019s timed calls, a span for each collective at each size, for ui.perfetto.dev or chrome://tracing (';

  return { traceNote, planned, progress, figure, figureNote, summaryPairs, checkLabel, checkValue, gradeNote, grading, WORDS, CONFIG_WORDS };
};
