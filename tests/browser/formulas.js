// formulas.js — the course's formulas as the browser draws them, checked in node: every line of
// every ```formula block (lexicon/*.md, lessons/*.md) converts to TeX with web/static/math.js,
// and Debian's KaTeX (the katex.min.js the server sends) renders that TeX without an error.
//
// Usage: node tests/browser/formulas.js        (e2e.js also runs it, as part of test_browser)
//
// Prints "ok - ..." / "not ok - ..." lines. What it proves:
//   1. no formula block would be left as plain text on a page for want of a parse or a render
//      (broken variant: drop "^" from math.js's tokenizer: U = 12*C^2+13*C no longer parses);
//   2. the TeX is the one math.js's header promises, exactly, for lines that show each rule:
//      a fraction's grouping parentheses dropped, runs of factors over their divisors, \cdot
//      before a number and beside words, subscripts, Greek, \left( \right) around a fraction
//      (broken variant: keep the parentheses of a numerator: \frac{(p - 1)}{...});
//   3. a line that is not `name = expression` is refused (the page then keeps its <pre>),
//      never turned into half a formula.
// And in the browser (runPages, which e2e.js calls with its Chromium and server):
//   4. every term and lesson with a formula block draws one KaTeX display per line, and no
//      page falls back to plain text (math.js would warn); on the ZeRO page each display's
//      TeX (KaTeX's MathML annotation) is math.js's for its line, in order; the plain text is
//      one click away, whole; the formulas take the page's text colour in the light and the
//      dark theme (screenshots: formulas-zero-light.png, formulas-zero-dark.png,
//      formulas-lesson-13.png) (broken variants: math.js drawing all but a block's last
//      line; app.css fixing the formulas' colour to the light theme's text);
//   5. never a broken page: without KaTeX (its script refused) or with a line that does not
//      parse, the block stays the plain <pre>, and the console says so once (broken
//      variants: the <pre> replaced before its lines are drawn; no check that KaTeX loaded);
//   6. pages without formulas do not load KaTeX.
'use strict';
const fs = require('fs');
const path = require('path');

const ROOT = path.join(__dirname, '..', '..');
const KATEX = '/usr/share/javascript/katex/katex.min.js';  // Debian's libjs-katex (make deps)

// Every line of every ```formula block: [{file, line}].
function formulaLines() {
  const out = [];
  for (const dir of ['lexicon', 'lessons']) {
    for (const name of fs.readdirSync(path.join(ROOT, dir)).filter((f) => f.endsWith('.md')).sort()) {
      const text = fs.readFileSync(path.join(ROOT, dir, name), 'utf8');
      for (const m of text.matchAll(/^```formula\n([\s\S]*?)^```/gm))
        for (const line of m[1].split('\n')) if (line.trim()) out.push({ file: `${dir}/${name}`, line: line.trim() });
    }
  }
  return out;
}

// The TeX of lines that show each rule of math.js's header.
const EXPECT = [
  ['bubble = (p-1)/(m+p-1)', '\\text{bubble} = \\frac{p - 1}{m + p - 1}'],
  ['t_ring = 2*(N-1)*alpha + 2*(N-1)/N*S/beta', 't_{\\text{ring}} = 2(N - 1)\\alpha + \\frac{2(N - 1)}{N}\\frac{S}{\\beta}'],
  ['stage_1 = 4*Psi+4*Psi+8*Psi/N', '\\text{stage 1} = 4\\Psi + 4\\Psi + \\frac{8\\Psi}{N}'],
  ['acts_sqrt = 4*B*T*(2*C+2+V+sqrt(L)*C+sqrt(L)*b-C)', '\\text{acts sqrt} = 4BT(2C + 2 + V + \\sqrt{L}C + \\sqrt{L}b - C)'],
  ['scores_per_block = B*NH*(T/N)^2', '\\text{scores per block} = B \\cdot \\mathit{NH} \\cdot \\left(\\frac{T}{N}\\right)^{2}'],
  ['Psi_rep = Psi-Psi_split', '\\Psi_{\\text{rep}} = \\Psi - \\Psi_{\\text{split}}'],
  ['bubble_time_per_stage = (p-1)*(t_F+t_B)', '\\text{bubble time per stage} = (p - 1)(t_{F} + t_{B})'],
  ['mfu = tokens_per_s*(6*Psi + 12*L*T*C)/(N*peak_flops)',
    '\\text{mfu} = \\frac{\\text{tokens per s} \\cdot (6\\Psi + 12LTC)}{N \\cdot \\text{peak flops}}'],
  ['bytes_sent_stages_0_1_2 = 2*(N-1)/N*4*Psi', '\\text{bytes sent stages 0, 1, 2} = \\frac{2(N - 1)}{N} \\cdot 4\\Psi'],
  ['acts = 4*(B/(N*m))*T*(2*C+2+V+L*(16*C+4+NH*T))',
    '\\text{acts} = 4 \\cdot \\frac{B}{Nm}T(2C + 2 + V + L(16C + 4 + \\mathit{NH} \\cdot T))'],
  ['S_crossover = (2*N-3)*N*alpha*beta/((N-1)*(N-2))', 'S_{\\text{crossover}} = \\frac{(2N - 3)N\\alpha\\beta}{(N - 1)(N - 2)}'],
  ['x = a - (b - c) + -d/e/f', 'x = a - (b - c) + \\frac{-d}{ef}'],
  ['x = a*-b + Psi*N - -c*d', 'x = a(-b) + \\Psi N - (-cd)'],
];

// Lines a formula block must not hold: each is refused with a reason.
const REFUSED = ['bubble = (p-1/(m+p-1)', 'bubble = p -', '= p-1', 'bubble = p $ 1', 'bubble = p = 1',
  'bytes_sent_per_rank = 2*(N-1)/N*S      with S = 4*Psi', 'sqrt(x) = y', 'x = sqrt(a, b)'];

function run(check) {
  let math, katex;
  try {
    math = require(path.join(ROOT, 'web', 'static', 'math.js'));
    katex = require(KATEX);
  } catch (e) {
    check(false, 'formulas: math.js and KaTeX load in node (is libjs-katex installed? make deps): ' + e.message);
    return;
  }
  const lines = formulaLines();
  const files = new Set(lines.map((l) => l.file));
  const lessons = [...files].filter((f) => f.startsWith('lessons/')).length;
  const bad = [];
  for (const { file, line } of lines) {
    try {
      katex.renderToString(math.toTex(line), { displayMode: true, throwOnError: true });
    } catch (e) {
      bad.push(`${file}: ${line}: ${e.message}`);
    }
  }
  for (const b of bad.slice(0, 20)) console.log('# ' + b);
  check(lines.length >= 150 && files.size >= 45 && lessons >= 4 && bad.length === 0,
    `formulas: every line of every formula block converts to TeX and KaTeX renders it (${lines.length} lines ` +
    `in ${files.size} files, ${lessons} of them lessons; ${bad.length} failed)`);

  for (const [line, want] of EXPECT) {
    let got;
    try { got = math.toTex(line); } catch (e) { got = 'error: ' + e.message; }
    check(got === want, `formulas: ${line}  ->  ${want}` + (got === want ? '' : `  (got ${got})`));
  }
  const accepted = REFUSED.filter((line) => {
    try { math.toTex(line); return true; } catch (e) { return false; }
  });
  check(accepted.length === 0, `formulas: ${REFUSED.length} lines that are not name = expression are refused, ` +
    `so the page keeps its plain text (accepted: ${JSON.stringify(accepted)})`);
}

// The formulas in the browser: browser (playwright-core's Chromium), base (the server's URL),
// outDir (the screenshots); check(ok, what) prints the line.
async function runPages(browser, base, outDir, check) {
  const math = require(path.join(ROOT, 'web', 'static', 'math.js'));
  const lines = formulaLines();
  const byFile = new Map();
  for (const l of lines) byFile.set(l.file, (byFile.get(l.file) || []).concat(l.line));
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
  const said = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') said.push(m.text()); });
  page.on('pageerror', (e) => said.push(String(e)));
  const open = async (file) => {
    await page.goto(new URL('/' + file.replace(/\.md$/, ''), base).href);
    await page.waitForLoadState('load');
  };

  // 4. Every page with formulas draws every line.
  const wrong = [];
  for (const [file, want] of byFile) {
    await open(file);
    const shown = await page.locator('article .formula .katex-display').count();
    const left = await page.locator('article pre > code.language-formula:visible').count();
    if (shown !== want.length || left !== 0) wrong.push(`${file}: ${shown} of ${want.length} drawn, ${left} left plain`);
  }
  for (const w of wrong.slice(0, 10)) console.log('# ' + w);
  check(wrong.length === 0 && said.length === 0, `formulas: every page with formula blocks (${byFile.size}) draws one ` +
    `KaTeX display per line (${lines.length} lines), none left plain, nothing in the console ` +
    `(${wrong.length} wrong; console: ${JSON.stringify(said.slice(0, 3))})`);

  // The ZeRO page: the TeX drawn is math.js's, line by line.
  const zero = byFile.get('lexicon/zero.md') || [];
  await open('lexicon/zero.md');
  const tex = await page.locator('article .formula annotation[encoding="application/x-tex"]').allTextContents();
  const expected = zero.map((l) => math.toTex(l));
  check(zero.length === 6 && tex.length === 6 && tex.every((t, k) => t.trim() === expected[k]),
    `formulas: /lexicon/zero draws its 6 lines, each as math.js's TeX (${tex.length} drawn; first: ${tex[0]})`);
  const box = page.locator('article .formula').first();
  const colours = async () => page.evaluate(() => {
    const k = document.querySelector('article .formula .katex');
    return [getComputedStyle(k).color, getComputedStyle(document.body).color, getComputedStyle(document.body).backgroundColor];
  });
  const light = await colours();
  await box.screenshot({ path: path.join(outDir, 'formulas-zero-light.png') });
  // The plain text, one click away and whole.
  const pre = box.locator('details.formula-plain pre');
  const hidden = !(await pre.isVisible());
  await box.locator('details.formula-plain summary').click();
  const plain = (await pre.textContent()).trim();
  check(hidden && await pre.isVisible() && plain === zero.join('\n'),
    `formulas: the plain text is folded under "plain text" and opens whole (${plain.split('\n').length} lines)`);
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = await colours();
  await box.screenshot({ path: path.join(outDir, 'formulas-zero-dark.png') });
  await page.emulateMedia({ colorScheme: 'light' });
  check(light[0] === light[1] && dark[0] === dark[1] && light[0] !== dark[0] && light[2] !== dark[2],
    `formulas: drawn in the page's text colour, light and dark (${light[0]} on ${light[2]}; ${dark[0]} on ${dark[2]})`);
  await open('lessons/13-pipeline-schedules.md');
  await page.locator('article .formula').first().screenshot({ path: path.join(outDir, 'formulas-lesson-13.png') });

  // 5. A line that does not parse: its block stays plain (math.js's own function, on a block
  // added to the page), and the console says why, once.
  said.length = 0;
  const kept = await page.evaluate(() => {
    const div = document.createElement('div');
    div.innerHTML = '<pre><code class="language-formula">bubble = (p-1)/(m+p-1)\nbubble = (p-1/(m+p-1)</code></pre>' +
      '<pre><code class="language-formula">x = (y</code></pre>';
    document.querySelector('article').appendChild(div);
    window.shardlabMath.renderFormulas(div);
    return [div.querySelectorAll('.katex').length, div.querySelectorAll('pre > code.language-formula').length,
      !!div.querySelector('pre') && div.querySelector('pre').parentElement === div];
  });
  check(kept[0] === 0 && kept[1] === 2 && kept[2] && said.length === 1 && /plain text/.test(said[0]),
    `formulas: a block with a line that does not parse stays the plain <pre>, one console line (${JSON.stringify(kept)}, ${JSON.stringify(said)})`);
  await page.close();

  // Without KaTeX (its script refused): the page keeps its <pre>, readable, and says so once.
  const bare = await browser.newPage();
  const bareSaid = [];
  bare.on('console', (m) => { if (m.type() === 'warning') bareSaid.push(m.text()); });
  bare.on('pageerror', (e) => bareSaid.push(String(e)));
  await bare.route('**/static/katex/katex.min.js', (r) => r.abort());
  await bare.goto(new URL('/lexicon/zero', base).href);
  await bare.waitForLoadState('load');
  const plainShown = await bare.locator('article pre > code.language-formula').first().isVisible();
  const drawn = await bare.locator('article .katex').count();
  check(plainShown && drawn === 0 && bareSaid.length === 1 && /KaTeX did not load/.test(bareSaid[0]),
    `formulas: without KaTeX the page shows the plain formulas, and says so once (${JSON.stringify(bareSaid)})`);
  // 6. Only pages with formulas load KaTeX.
  const loads = [];
  bare.on('request', (r) => { if (/katex|math\.js/.test(r.url())) loads.push(r.url()); });
  for (const p of ['/', '/lexicon/barrier', '/labs/zero']) await bare.goto(new URL(p, base).href);
  check(loads.length === 0, `formulas: the home page, a term without formulas and a lab's form load no KaTeX (${loads.length})`);
  await bare.close();
}

module.exports = { run, runPages, formulaLines };

if (require.main === module) {
  let failed = 0;
  run((ok, what) => {
    console.log((ok ? 'ok - ' : 'not ok - ') + what);
    if (!ok) failed++;
  });
  process.exit(failed ? 1 : 0);
}
