// run_experts.js — the experts panel of a run's page, for a run whose model has a mixture of
// experts (--moe): where each block's router sent the tokens, step after step, as a heat
// strip, and the load-balancing loss under it. Balanced routing is an even grey; a router
// that collapses onto a few experts draws dark rows among pale ones.
//
// What it reads: rank 0's step events' expert_load ([L][E] assignments per block and expert),
// aux_loss, dropped and assignments (labs/DESIGN.md, Events), which run_state.js keeps in
// S.experts. It draws with charts.js's theme and hidpi (window.ShardlabCharts); run.js loads
// it and takes window.ShardlabExperts: { Experts }.
'use strict';

window.ShardlabExperts = (function () {
  const { el } = window.ShardlabDom;
  const { fmt, theme, hidpi, haloText } = window.ShardlabCharts;

  const rowOf = (E) => (E <= 16 ? 11 : 5);  // px an expert's row: numbered up to 16 experts
  const GAP = 10;       // px between blocks
  const LEFT = 64;      // px for the labels
  const AUX_H = 56;     // px of the aux loss's line under the strips
  const FULL = 2;       // a cell is darkest at twice the balanced share, 2/E, and above

  // A block's share of its assignments per expert at one step.
  const shares = (row) => {
    const total = row.reduce((a, b) => a + b, 0);
    return row.map((n) => (total > 0 ? n / total : 0));
  };

  // The sentence the panel's note and the canvas's label say: the latest step, each block's
  // busiest expert against the balanced share, the aux loss and the drops.
  function describe(last) {
    if (!last) return 'waiting for the first step ...';
    const E = last.load[0] ? last.load[0].length : 0;
    const blocks = last.load.map((row, l) => {
      const s = shares(row), top = s.indexOf(Math.max(...s));
      return 'block ' + l + ' expert ' + top + ' ' + Math.round(100 * s[top]) + '%';
    });
    return 'step ' + last.step + ': the busiest expert of each block took ' + blocks.join(', ') +
      ' of its assignments (balanced: ' + (E ? Math.round(100 / E) : 0) + '%); aux loss ' + fmt(last.aux, 3) +
      ' (1 when balanced); ' + last.dropped + ' of ' + last.assignments + ' assignments dropped by capacity';
  }

  function Experts(panel) {
    const canvas = el('canvas', { role: 'img' });
    const table = el('details', { class: 'data' });
    const wrap = el('div', { class: 'gantt-box' }, canvas);  // as tall as the strips need
    panel.s.append(wrap, table);

    function drawAux(g, t, steps, x0, y0, w) {
      g.font = t.font;
      const vals = steps.map((s) => s.aux).filter((v) => typeof v === 'number' && isFinite(v));
      if (!vals.length) return;
      const lo = Math.min(1, ...vals), hi = Math.max(1.05, ...vals), y = (v) => y0 + AUX_H - 8 - ((v - lo) / (hi - lo)) * (AUX_H - 16);
      g.strokeStyle = t.grid;
      g.setLineDash([4, 3]);
      g.beginPath(); g.moveTo(x0, y(1)); g.lineTo(x0 + w, y(1)); g.stroke();  // the balanced value
      g.setLineDash([]);
      g.strokeStyle = t.c.loss || t.fg;
      g.lineWidth = 1.5;
      g.beginPath();
      steps.forEach((s, i) => {
        if (typeof s.aux !== 'number') return;
        const x = x0 + (steps.length > 1 ? (i / (steps.length - 1)) * w : w / 2);
        if (i === 0) g.moveTo(x, y(s.aux)); else g.lineTo(x, y(s.aux));
      });
      g.stroke();
      g.lineWidth = 1;
      g.fillStyle = t.fg;
      g.font = t.font;
      g.textAlign = 'right';
      g.textAlign = 'left';
      g.fillText('aux loss', 2, (y(hi) + y(1)) / 2 + 4);
      g.textAlign = 'right';
      g.fillStyle = t.muted;
      g.fillText(fmt(hi, 2), LEFT - 6, y(hi) + 4);
      g.fillText('1', LEFT - 6, y(1) + 4);
    }

    function update(S) {
      const steps = S.experts, last = steps[steps.length - 1];
      panel.n.textContent = describe(last);
      canvas.setAttribute('aria-label', 'tokens per expert, a strip per block over the steps: ' + describe(last));
      if (!last) return;
      const t = theme(), L = last.load.length, E = last.load[0] ? last.load[0].length : 0;
      const width = Math.max(320, wrap.clientWidth || 800), plotW = width - LEFT - 8;
      const ROW = rowOf(E), height = L * (E * ROW + GAP) + AUX_H + 18;
      const g = hidpi(canvas, width, height);
      g.clearRect(0, 0, width, height);
      const cellW = plotW / Math.max(1, steps.length);
      const heat = t.c.acts || t.fg;
      for (let l = 0; l < L; l++) {
        const y0 = l * (E * ROW + GAP);
        steps.forEach((s, i) => {
          const sh = shares(s.load[l] || []);
          for (let e = 0; e < E; e++) {
            g.globalAlpha = Math.min(1, (sh[e] * E) / FULL);  // the balanced share 1/E is half
            g.fillStyle = heat;
            g.fillRect(LEFT + i * cellW, y0 + e * ROW, Math.ceil(cellW), ROW - 1);
          }
        });
        g.globalAlpha = 1;
        g.fillStyle = t.fg;
        g.font = t.font;
        g.textAlign = 'right';
        haloText(g, 'block ' + l, LEFT - 22, y0 + (E * ROW) / 2 + 4, 'right', t.font);
        if (ROW > 8) {  // each row's expert, in small type beside it
          g.fillStyle = t.muted;
          g.font = '9px ' + t.font.replace(/^\S+\s/, '');
          for (let e = 0; e < E; e++) g.fillText(String(e), LEFT - 4, y0 + e * ROW + ROW - 2);
        }
      }
      const auxY = L * (E * ROW + GAP);
      drawAux(g, t, steps, LEFT, auxY, plotW);
      g.fillStyle = t.muted;
      g.textAlign = 'left';
      g.fillText('step ' + steps[0].step, LEFT, height - 2);
      g.textAlign = 'right';
      g.fillText('step ' + last.step + ' (a row per expert; darker: more of the block\u2019s tokens)', width - 8, height - 2);
      // The latest step's numbers, exact, for whoever reads a table better than a shade.
      const open = table.open;
      const head = el('tr', null, el('th', { text: 'block' }), ...Array.from({ length: E }, (_, e) => el('th', { class: 'num', text: 'expert ' + e })));
      const rows = last.load.map((row, l) => el('tr', null, el('td', { text: String(l) }), ...row.map((n) => el('td', { class: 'num', text: String(n) }))));
      table.replaceChildren(el('summary', { text: 'step ' + last.step + '\u2019s assignments per block and expert, as a table' }),
        el('table', { class: 'data' }, el('thead', null, head), el('tbody', null, ...rows)));
      table.open = open;
    }
    return { update, destroy: () => { wrap.remove(); table.remove(); } };
  }

  return { Experts, describe };
})();
