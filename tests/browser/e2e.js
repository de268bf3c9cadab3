// e2e.js — the course in a real browser, as a student uses it: headless Chromium (Debian's
// package) driven by playwright-core, against `shardlab web` started here.
//
// Usage: node tests/browser/e2e.js SHARDLAB OUT_DIR
//   SHARDLAB  build/shardlab;  OUT_DIR  where the screenshots go (build/browser)
//
// Prints "ok - ..." / "not ok - ..." lines, which tests/run.sh counts. What it proves: the home
// page's lexicon search filters as one types and Enter opens the term; the term page's Run
// button leads to its lab's form; the form starts a 2-rank run (with the token the server
// printed) and the browser lands on its dashboard; the dashboard follows the live run (the
// step counter moves, the loss chart and the memory bars are drawn) and shows the summary at
// the end, and the lab's checks in words where a name does not say it (mem.ddp_total); its "compare" link starts a short run with it as the reference (--ref), whose loss
// chart draws the reference's curve beside its own; that run's "Grade this run" button grades
// it and shows the rubric, every check PASS for the reference lab, and the saved grade comes
// back on reload; a collectives run's page has the bus bandwidth by message size as its main
// figure, its ceiling explained in the terminal dashboard's words, every label in words, no
// timeline, a summary of what the lab ran and a grade text of what its rubric checks; the
// memory planner plans a layout, shows the ZeRO paper's figure 1 by its names with the
// terminal's definitions, in the site's style and within a phone's width, and its "Check it"
// runs the lab and marks every figure equal; a lab's "Your TODO regions" (the server started with --checks, make
// check's programs for a copy with regions passed, failed and not written yet) draws a row per
// region when "Check them" is pressed, its colours readable light and dark; no page logs an
// error. Then busy.js, on servers of its own: the form's "Busy:" when the one slot is taken,
// and the error page of a run whose ranks fail at start (a full disk). The screenshots are
// for a person to look at.
// First, the course's formulas (formulas.js): converted to TeX and rendered by KaTeX in node,
// then drawn on every page that has them, their plain text a click away, light and dark.
'use strict';
const { spawn, spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');
const formulas = require('./formulas.js');
const busy = require('./busy.js');

const [shardlab, outDir] = process.argv.slice(2);
const root = path.resolve(__dirname, '..', '..');
let failed = 0;
function check(ok, what) {
  console.log((ok ? 'ok - ' : 'not ok - ') + 'browser: ' + what);
  if (!ok) failed++;
}

// make check's programs (what make web passes as --checks) for a copy of labs/ in which AdamW
// and the ring's reduce-scatter are written, the ring's all-gather is written wrong (the chunk
// of the round before: tests/variants.h) and DDP's regions are not written yet: the starter
// (make starter) with the reference's common/model/adamw.c and a broken 03-collectives/ring.c. Built from this
// build's objects, so that only the files that differ compile. The directory, or null.
function buildChecks(dir) {
  const build = path.dirname(path.resolve(shardlab)), copy = path.join(dir, 'copy'), bdir = path.join(dir, 'build');
  const sh = (cmd) => spawnSync('sh', ['-c', cmd], { cwd: root, encoding: 'utf8' });
  let r = sh(`sh labs/command/grade/starter.sh '${copy}' && mkdir -p '${bdir}' && for d in common algo; do ` +
    `[ ! -d '${build}'/$d ] || cp -rp '${build}'/$d '${bdir}/'; done && cp -p labs/common/model/adamw.c '${copy}/labs/common/model/'`);
  const ring = fs.readFileSync(path.join(root, 'labs/03-collectives/ring.c'), 'utf8');
  const right = 'if ((m = piece(n, p, mod(r - k + 1, p), i, &off)) == 0) continue;';
  if (r.status === 0 && ring.includes(right)) {
    fs.writeFileSync(path.join(copy, 'labs/03-collectives/ring.c'), ring.replace(right, right.replace('r - k + 1', 'r - k')));
    r = sh(`make -s -j2 BUILD='${bdir}' LABS_SRC='${copy}/labs' CUDA=0 todo-programs`);
  }
  check(r.status === 0 && ring.includes(right), 'make check\'s programs build for a copy with regions passed, failed and ' +
    'not written yet: ' + ((r.stderr || '') + (r.stdout || '')).slice(0, 300));
  return r.status === 0 ? path.join(bdir, 'todo') : null;
}

async function main() {
  fs.mkdirSync(outDir, { recursive: true });
  formulas.run(check);
  const runs = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlab-browser-'));
  const checksDir = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlab-browser-checks-'));
  const checks = buildChecks(checksDir);
  const server = spawn(shardlab, ['web', '--port', '0', '--runs', runs].concat(checks ? ['--checks', checks] : []),
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    let text = '';
    const t = setTimeout(() => reject(new Error('no URL from shardlab web within 20 s')), 20000);
    server.stdout.on('data', (d) => {
      text += d;
      const m = text.match(/open (http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]+)/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
  });
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    await formulas.runPages(browser, url, outDir, check);
    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const errors = [];
    // The one error a page may log: the browser's note of the 400 that POST /api/runs answers
    // to a batch that does not divide (the form shows its reason), once, where it is expected.
    let refusalExpected = false;
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      const refusal = / 400 /.test(m.text()) && /\/api\/runs$/.test((m.location() || {}).url || '');
      if (refusal && refusalExpected) refusalExpected = false;
      else errors.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(String(e)));

    // Home: the lexicon search narrows the list as one types.
    await page.goto(url);
    const all = await page.locator('#lexicon li[data-search]:visible').count();
    await page.fill('#lexicon-search', 'zero stage 2');
    await page.waitForTimeout(300);
    const shown = await page.locator('#lexicon li[data-search]:visible').count();
    check(all === 49 && shown === 1, `the lexicon search narrows 49 terms to 1 for "zero stage 2" (${all} -> ${shown})`);
    await page.screenshot({ path: path.join(outDir, 'home-search.png') });

    // Enter opens the term; its Run button leads to the lab's form.
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/lexicon\/zero-stage-2$/);
    check((await page.title()).startsWith('ZeRO stage 2'), 'Enter opens the term page');
    await page.click('a.button[href^="/labs/zero"]');
    await page.waitForSelector('#lab-form');
    const stage = await page.locator('[name=stage]').inputValue();
    check(/\/labs\/zero\?stage=2$/.test(page.url()) && stage === '2',
      `the term's Run button opens the zero lab's form at stage 2 (${page.url()}, --stage ${stage})`);

    // The fold of model options opens below the run's fieldset, the button below it, on the left.
    await page.click('#lab-form details summary');
    const fieldsetBox = await page.locator('#lab-form fieldset').boundingBox();
    const buttonBox = await page.locator('#lab-form button[type=submit]').boundingBox();
    const layersBox = await page.locator('#lab-form [name=layers]').boundingBox();
    check(Math.abs(buttonBox.x - fieldsetBox.x) < 4 && buttonBox.y > layersBox.y,
      `with "Model and data" open, the button sits at the form's left edge, below the fields (x ${Math.round(buttonBox.x)} vs ${Math.round(fieldsetBox.x)})`);
    await page.click('#lab-form details summary');

    // The form starts a 2-rank run and the browser follows it.
    await page.fill('input[name=n]', '2');
    await page.fill('input[name=steps]', '600');  // long enough to watch it move
    await page.click('button[type=submit]');
    await page.waitForURL(/\/runs\//, { timeout: 15000 });
    check(true, 'the form starts the run and opens its dashboard');
    const status = page.locator('#dashboard');
    await page.waitForFunction(() => /step [1-9]\d* of 600/.test(document.querySelector('#dashboard').textContent), null, { timeout: 30000 });
    const stepOf = async () => Number(((await status.textContent()).match(/step (\d+) of 600/) || [0, 0])[1]);
    const first = await stepOf();
    await page.screenshot({ path: path.join(outDir, 'run-live.png'), fullPage: true });
    await page.waitForFunction((n) => {
      const m = document.querySelector('#dashboard').textContent.match(/step (\d+) of 600/);
      return m && Number(m[1]) > n;
    }, first, { timeout: 30000 });
    check(await stepOf() > first, `the dashboard follows the live run (step ${first}, then ${await stepOf()})`);
    const live = await status.textContent();
    check(/ETA \d+:\d\d/.test(live) && /[\d.]+k? tok\/s/.test(live) && /[\d.]+ ms\/step/.test(live),
      'the live run shows its ETA, tokens a second and ms a step, as the terminal does (' + live.slice(0, 160) + ')');
    const canvases = await page.locator('#dashboard canvas').count();
    check(canvases >= 3, `the loss chart, the step-time and memory bars and the timeline are drawn (${canvases} canvases)`);
    // ZeRO stage 2 moves its gradients by reduce-scatter and its weights by all-gather: the
    // timeline tells them apart, and the step time names the communication both ways.
    await page.waitForFunction(() => /of communication in all/.test(document.querySelector('#p-time').textContent), null, { timeout: 30000 });
    const gantt = await page.locator('#p-gantt').textContent(), timeText = await page.locator('#p-time').textContent();
    check(/RS reduce-scatter/.test(gantt) && /AG all-gather/.test(gantt) && /waited for/.test(timeText) &&
      /% of it hidden behind compute/.test(timeText) && /sent [\d.]+ MiB a step/.test(timeText),
      'the timeline tells reduce-scatter from all-gather; the step time names the communication waited for and all of it');

    // The end: the summary.
    await page.waitForFunction(() => /loss at the last step/.test(document.querySelector('#dashboard').textContent), null, { timeout: 90000 });
    await page.screenshot({ path: path.join(outDir, 'run-end.png'), fullPage: true });
    check(await page.locator('#run-status .st-ok').count() === 1, 'at the end: status ok, and the summary');
    // The lab's checks say what they compare where the name does not: ZeRO's mem.ddp_total is
    // its memory table's "DDP holds" column against the ddp lab's own total.
    await page.waitForFunction(() => /mem\.ddp_total/.test(document.querySelector('#p-checks').textContent), null, { timeout: 30000 });
    const checksText = await page.locator('#p-checks').textContent();
    check(/mem\.ddp_total: the memory table\u2019s \u201cDDP holds\u201d column adds up to what the ddp lab itself holds/.test(checksText),
      'the run\u2019s checks say what mem.ddp_total is (' + (checksText.match(/mem\.ddp_total[^\n]{0,80}/) || [''])[0] + ')');

    // The finished run as the reference of the next: its page links to the lab's form with
    // the run chosen under --ref, and the new run's loss chart draws the reference's 600 steps
    // beside its own, with the gap between the two at its latest step.
    const firstId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
    await page.click('a#compare');
    await page.waitForURL(/\/labs\/zero\?ref=/);
    await page.waitForFunction((id) => Array.from(document.querySelectorAll('select[name=ref] option')).some((o) => o.value === id), firstId);
    const chosen = await page.locator('select[name=ref]').inputValue();
    await page.screenshot({ path: path.join(outDir, 'lab-ref.png') });
    check(chosen === firstId, `the run's "compare" link opens the lab's form with the run chosen under --ref (${chosen})`);
    await page.waitForFunction(() => document.querySelector('input[name=steps]').value === '600', null, { timeout: 10000 }).catch(() => {});
    const refSteps = await page.locator('input[name=steps]').inputValue();
    check(refSteps === '600', `compared with a 600-step run, the form starts at 600 steps (${refSteps})`);

    // Grading from the page, on that short run of the same lab: over a few steps the
    // distributed loss equals the single-rank reference's within the rubric's tolerance (fp32
    // sums in another order drift apart over hundreds of steps).
    await page.fill('input[name=n]', '2');
    await page.fill('input[name=steps]', '6');
    await page.click('button[type=submit]');
    await page.waitForURL(/\/runs\//, { timeout: 15000 });
    const lossPanel = page.locator('#p-loss');
    await page.waitForFunction(() => /reference run \S+ \(\d/.test(document.querySelector('#p-loss').textContent), null, { timeout: 60000 });
    const legend = await lossPanel.textContent();
    const label = await page.locator('#p-loss .chart-box canvas').getAttribute('aria-label');
    const drawn = await page.locator('#p-loss .chart-box canvas').evaluate((c) => {
      const chart = window.Chart.getChart(c);
      return chart ? chart.data.datasets.map((d) => d.label + ':' + d.data.length).join(' ') : 'no chart';
    });
    check(legend.includes('reference run ' + firstId + ' (') && label.includes('reference run ' + firstId + ', 600 steps') &&
      /reference:600\b/.test(drawn),
      `the new run's loss chart draws the reference run's 600 steps beside its own (${label}; datasets ${drawn})`);
    await page.waitForSelector('#run-status .st-ok', { timeout: 60000 });
    const gradeButton = page.getByRole('button', { name: 'Grade this run' });
    await gradeButton.waitFor({ timeout: 15000 });
    await gradeButton.click();
    const caption = page.locator('#p-grade table.rubric caption');
    await caption.waitFor({ timeout: 120000 });
    const totalOf = async () => ((await caption.textContent()).match(/Total (\d+)\/(\d+) points/) || []).slice(1);
    const [got, max] = await totalOf();
    const results = await page.locator('#p-grade table.rubric tbody td.res').allTextContents();
    const heads = await page.locator('#p-grade table.rubric thead th').allTextContents();
    check(got !== undefined && got === max && results.length >= 5 && results.every((r) => r === 'PASS') &&
      heads.join(',').startsWith('Check,Result,Points,Measured,Expected'),
      `"Grade this run" shows the rubric: total ${got}/${max}, ${results.length} checks, all PASS (${results.join(' ')})`);
    await page.screenshot({ path: path.join(outDir, 'run-grade.png'), fullPage: true });
    await lossPanel.screenshot({ path: path.join(outDir, 'run-ref-loss.png') });
    await page.locator('#p-grade').screenshot({ path: path.join(outDir, 'run-grade-panel.png') });
    // The grade was saved with the run (grade.json): the page shows it again, without the button.
    await page.reload();
    await caption.waitFor({ timeout: 30000 });
    const [again, againMax] = await totalOf();
    check(again === got && againMax === max && await page.getByRole('button', { name: 'Grade this run' }).count() === 0,
      `reloaded, the page shows the saved grade (${again}/${againMax}) instead of the button`);

    // A lab's form, its fields filled in (those under "Model and data" opened first),
    // submitted: the browser lands on the new run's page (landing false: it stays on the form).
    const startFromForm = async (lab, fields, landing = true) => {
      await page.goto(new URL('/labs/' + lab, url).href);
      await page.waitForSelector('#lab-form');
      if (await page.locator('#lab-form details input[name="layers"]').count()) await page.click('#lab-form details summary');
      for (const [name, value] of Object.entries(fields)) await page.fill(`input[name="${name}"]`, value);
      await page.click('button[type=submit]');
      if (landing) await page.waitForURL(/\/runs\//, { timeout: 15000 });
    };
    // A batch that does not divide over the ranks (ddp on 3 ranks, the batch of 8): the form
    // says so once, with the ranks and batches that would, and starts nothing.
    refusalExpected = true;
    await startFromForm('ddp', { n: '3', steps: '5' }, false);
    await page.waitForFunction(() => document.querySelector('#lab-status').classList.contains('error'), null, { timeout: 15000 });
    const refused = await page.locator('#lab-status').textContent();
    check(/^--batch 8 does not divide over 3 ranks \(each rank takes B\/N sequences\): use 2 or 4 ranks, or --batch 6 or 9$/.test(refused) &&
      /\/labs\/ddp/.test(page.url()), 'ddp on 3 ranks: the form says, once, the batch does not divide and what would: ' + refused);
    // A run that fails at start in a way the form cannot know (pp on 4 stages of a 2-block
    // model): its page shows the ranks' one reason once, says the panels will not fill, names
    // no device, offers neither a grade nor a timeline to download.
    await startFromForm('pp', { n: '4', steps: '5', layers: '2' });
    await page.waitForFunction(() => /4 stages need at least 4 blocks/.test((document.querySelector('.run-errors') || {}).textContent || ''),
      null, { timeout: 30000 });
    await page.waitForFunction(() => /nothing to grade/.test(document.querySelector('#dashboard').textContent), null, { timeout: 30000 });
    const failedText = await page.locator('#dashboard').textContent();
    const errorItems = await page.locator('.run-errors li').allTextContents();
    await page.screenshot({ path: path.join(outDir, 'run-failed.png'), fullPage: true });
    check(/ended before its first step/.test(failedText) && /ended before every rank finished a step/.test(failedText) &&
      !/waiting for/.test(failedText) && await page.getByRole('button', { name: 'Grade this run' }).count() === 0,
      "a run that failed before it started: the ranks' own reason, panels that say it ended, no grade offered");
    check(errorItems.length === 1 && /^every rank: /.test(errorItems[0]) && !/device unknown/.test(failedText) &&
      /did not start/.test(await page.locator('#run-status').textContent()) && !(await page.locator('.run-trace').isVisible()),
      'its error once, for every rank; no "device unknown", no timeline link to a 409: ' + JSON.stringify(errorItems));
    // A pipeline run draws its schedule as the terminal prints it: a row per stage, forwards,
    // backwards and the shaded bubble (1F1B, 2 stages, 4 micro-batches: 'ab..AAcBBdCC.DD').
    await startFromForm('pp', { n: '2', steps: '3' });
    await page.waitForSelector('.schedule .sched-row', { timeout: 60000 });
    const rowsText = await page.locator('.schedule .sched-row').allTextContents();
    const idle = await page.locator('.schedule .sched-idle').count();
    await page.locator('.schedule').screenshot({ path: path.join(outDir, 'run-pp-schedule.png') });
    check(rowsText.length === 2 && rowsText[0].replace(/\u00a0/g, '.') === 'stage 0ab..AAcBBdCC.DD' && idle === 6,
      `a pipeline run draws its schedule: ${JSON.stringify(rowsText)}, ${idle} idle cells`);
    // HSDP (fsdp --replicate 2 on 4 ranks): the form takes the option, and the timeline draws
    // the sums across replicas as their own kind, named in the legend; a plain run's legend
    // (the zero run above) has no such entry.
    await startFromForm('fsdp', { n: '4', steps: '3', replicate: '2' });
    await page.waitForFunction(() => /across replicas/.test((document.querySelector('#p-gantt') || {}).textContent || ''), null,
      { timeout: 60000 });
    await page.locator('#p-gantt').screenshot({ path: path.join(outDir, 'run-hsdp-timeline.png') });
    const hsdpLegend = await page.locator('#p-gantt .legend').innerText();
    check(/ar rs ag: a collective across replicas/.test(hsdpLegend) && /RS reduce-scatter/.test(hsdpLegend) && !/across/.test(gantt),
      'an HSDP run\'s timeline names the collectives across replicas as a kind of their own; a run without replicas does not: ' +
      hsdpLegend.replace(/\n/g, ' | '));
    // Context parallelism (cp on 2 ranks): the ring's K/V blocks are a kind of their own on
    // the timeline, named in the legend, drawn as KV and not as plain sends and receives.
    await startFromForm('cp', { n: '2', steps: '3' });
    await page.waitForFunction(() => /keys and values between ranks/.test((document.querySelector('#p-gantt') || {}).textContent || ''),
      null, { timeout: 60000 });
    await page.locator('#p-gantt').screenshot({ path: path.join(outDir, 'run-cp-timeline.png') });
    const cpLegend = await page.locator('#p-gantt .legend').innerText();
    check(/KV attention\u2019s keys and values between ranks/.test(cpLegend) && !/S send/.test(cpLegend) && !/across/.test(cpLegend),
      'a cp run\'s timeline draws the ring\'s K/V blocks as a kind of their own, not as sends and receives: ' +
      cpLegend.replace(/\n/g, ' | '));
    // The collectives lab, which trains nothing: its page's main figure is the bus bandwidth
    // against message size, a line per collective named in words, under this machine's
    // memory-copy ceiling, which says what it is and why points may pass it, in the terminal
    // dashboard's words. No timeline (one span a measurement is no picture of a step), no
    // loss, step time or memory panels; the status line and the summary say what the lab ran;
    // the grade says what collectives.correct checks; no label on the page is a file's key.
    // Sizes up to 1 MiB, 5 calls each (steps are its --iters): seconds, not a minute.
    await startFromForm('collectives', { n: '2', 'max-bytes': '1M', steps: '5' });
    await page.waitForSelector('#p-summary table.kv', { timeout: 120000 });
    await page.waitForSelector('.busbw-note:not([hidden])', { timeout: 30000 });
    const coll = await page.evaluate(() => {
      const vis = (sel) => Array.from(document.querySelectorAll(sel)).filter((e) => !e.closest('[hidden]') && e.getClientRects().length);
      const panels = vis('.panels > .panel');
      const fig = document.querySelector('#p-busbw'), box = fig.getBoundingClientRect(), grid = document.querySelector('.panels').getBoundingClientRect();
      const chart = window.Chart.getChart(document.querySelector('#p-busbw canvas'));
      document.querySelectorAll('#dashboard details').forEach((d) => { d.open = true; });
      return {
        first: panels.length ? panels[0].id : '', ids: panels.map((p) => p.id), wide: box.width > 0.95 * grid.width,
        canvases: vis('#dashboard canvas').filter((c) => !c.closest('.legend')).map((c) => c.closest('.panel').id),
        datasets: chart ? chart.data.datasets.map((d) => d.label) : [], xType: chart ? chart.options.scales.x.type : '',
        ticks: chart ? chart.scales.x.ticks.map((t) => t.label) : [],
        legend: document.querySelector('#p-busbw .busbw-legend').innerText, note: document.querySelector('.busbw-note').textContent,
        aria: document.querySelector('#p-busbw canvas').getAttribute('aria-label'),
        status: document.querySelector('#run-status').textContent, text: document.querySelector('#run-status').innerText + '\n' + document.querySelector('.panels').innerText,
        summary: Array.from(document.querySelectorAll('#p-summary table.kv th')).map((th) => th.textContent),
        head: Array.from(document.querySelectorAll('#p-busbw table.data th')).map((th) => th.textContent),
        grade: document.querySelector('#p-grade .note').textContent,
      };
    });
    const runId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
    check(coll.first === 'p-busbw' && coll.wide && coll.canvases.length === 1 && coll.canvases[0] === 'p-busbw' && coll.xType === 'logarithmic' &&
      coll.ticks[0] === '4 B' && coll.ticks[coll.ticks.length - 1] === '1 MiB' && /all-reduce up to [\d.]+ GB\/s/.test(coll.aria),
      `the collectives run's main figure: bus bandwidth by message size, first and full width, the page's one chart, sizes on a log axis ` +
      `(${coll.ids.join(' ')}; ticks ${coll.ticks.join(', ')})`);
    const words = ['all-reduce', 'reduce-scatter', 'all-gather', 'broadcast', 'reduce', 'all-to-all'];
    check(words.every((w, i) => coll.datasets[i] === w) && coll.datasets[words.length] === 'memcpy ceiling' &&
      words.every((w) => coll.legend.includes(w)) && /memcpy ceiling, [\d.]+ GB\/s: one core copying a buffer larger than its caches/.test(coll.legend),
      'a line per collective, named in words, and the ceiling labelled with what it is: ' + coll.legend.replace(/\n/g, ' | '));
    // The terminal dashboard on the same run says the same words under its chart.
    const tui = spawnSync(shardlab, ['tui', path.join(runs, runId), '--dump', '--width', '200', '--height', '60'], { encoding: 'utf8' });
    const tuiLines = (tui.stdout || '').split('\n');
    const at = tuiLines.findIndex((l) => /memcpy ceiling, [\d.]+ GB\/s/.test(l));
    const tuiNote = at < 0 ? '' : tuiLines.slice(at + 1).join('\n').split(/\n\s*\n/)[0].split('\n').map((l) => l.trim()).join(' ');
    const webNote = coll.note.replace(/\u2019/g, '\'');
    check(/^Points can pass it: .*broadcast.*reduce/.test(webNote) && webNote === tuiNote && tuiLines[at].includes(coll.legend.split('\n').pop().trim()),
      'why points may pass the ceiling, beside the chart, in the terminal dashboard\'s words: "' + webNote + '"' +
      (webNote === tuiNote ? '' : ' (the terminal: "' + tuiNote + '")'));
    check(!/no training steps|\bsteps? \d/.test(coll.text) && /\b\d+ of \d+ measurements/.test(coll.status) &&
      ['collectives', 'message sizes', 'ranks', 'algorithm', 'wrong elements (#wrong)'].every((k) => coll.summary.includes(k)),
      'the status line and the summary say what the lab ran, not steps: ' + coll.status.slice(0, 120) + '; ' + coll.summary.join(', '));
    const raw = coll.text.match(/\b(all_reduce|reduce_scatter|all_gather|memcpy_gbps|memcpy gbps|avg_busbw|avg busbw|world_size|time_us|min_bytes|min bytes|direct_max_bytes|[a-z_]+\.\d+\.(wrong|busbw))\b/);
    check(!raw && coll.head.join('|') === 'collective|size|floats|time per call (\u00b5s)|algbw (GB/s)|busbw (GB/s)|#wrong|algorithm',
      'every label in words, every fold open (no key from the run\'s files): ' + (raw ? raw[0] : coll.head.join(', ')));
    check(!coll.ids.includes('p-gantt') && !coll.ids.includes('p-loss') && !/other collective \(/.test(coll.text),
      'no timeline of one span, no loss, step time or memory panels: ' + coll.ids.join(' '));
    check(/collectives\.correct/.test(coll.grade) && /#wrong = 0 on every row/.test(coll.grade) && !/single-rank|global batch/.test(coll.grade),
      'the grade says what collectives.correct checks, and no reference run: ' + coll.grade);
    await page.evaluate(() => document.querySelectorAll('#dashboard details').forEach((d) => { d.open = false; }));
    await page.screenshot({ path: path.join(outDir, 'run-collectives.png'), fullPage: true });
    await page.locator('#p-busbw').screenshot({ path: path.join(outDir, 'run-collectives-busbw.png') });
    // On a phone the legend and the note go under the chart, which keeps the width.
    await page.setViewportSize({ width: 390, height: 800 });
    await page.waitForTimeout(300);
    const narrow = await page.evaluate(() => {
      const c = document.querySelector('#p-busbw canvas').getBoundingClientRect(), n = document.querySelector('.busbw-note').getBoundingClientRect();
      return { chart: c.width, under: n.top > c.bottom, overflow: document.documentElement.scrollWidth > window.innerWidth + 1 };
    });
    await page.screenshot({ path: path.join(outDir, 'run-collectives-narrow.png'), fullPage: true });
    check(narrow.chart > 300 && narrow.under && !narrow.overflow,
      `at 390 px the chart keeps the width (${Math.round(narrow.chart)} px), the note under it, nothing wider than the screen`);
    await page.setViewportSize({ width: 1280, height: 1400 });
    // Experts (--moe) from the single lab's form, the load-balancing loss off: the experts panel
    // draws a strip per block, its note names each block's busiest expert against the balanced
    // share, and its table holds the last step's assignments, B T K a block.
    await page.goto(new URL('/labs/single', url).href);
    await page.waitForSelector('#lab-form');
    check(!(await page.locator('input[name="moe"]').isVisible()), 'the single lab\'s form keeps --moe folded, under "Experts"');
    await page.click('#lab-form details.experts summary');
    await page.fill('input[name="moe"]', '4');
    await page.fill('input[name="aux-weight"]', '0');
    await page.fill('input[name="steps"]', '60');
    await page.click('button[type=submit]');
    await page.waitForURL(/\/runs\//, { timeout: 15000 });
    await page.waitForSelector('#run-status .st-ok', { timeout: 120000 });
    await page.waitForSelector('#p-experts:not([hidden]) canvas', { timeout: 30000 });
    const moe = await page.evaluate(() => {
      const p = document.querySelector('#p-experts'), c = p.querySelector('canvas');
      const cells = Array.from(p.querySelectorAll('table tbody tr')).map((tr) => Array.from(tr.children).slice(1).map((td) => Number(td.textContent)));
      return { note: p.querySelector('.note').textContent, label: c.getAttribute('aria-label') || '', h: c.getBoundingClientRect().height, cells };
    });
    await page.locator('#p-experts').screenshot({ path: path.join(outDir, 'run-experts.png') });
    check(/^step 60: the busiest expert of each block took block 0 expert \d \d+%, block 1 expert \d \d+% of its assignments \(balanced: 25%\); aux loss [\d.]+ \(1 when balanced\); 0 of 2048 assignments dropped/.test(moe.note) &&
      moe.label.includes(moe.note) && moe.h > 80 && moe.cells.length === 2 && moe.cells.every((r) => r.length === 4 && r.reduce((a, b) => a + b, 0) === 1024),
      'a --moe run draws its experts: ' + moe.note + ' (table ' + JSON.stringify(moe.cells) + ')');
    // The memory planner: the form filled in from the address, a table of bytes per GPU by
    // category, and whether it fits the card chosen.
    await page.goto(new URL('/plan?lab=zero&n=8&stage=3&model=gpt2&mixed=on&gpu=rtx4090', url).href);
    const planRows = await page.locator('#plan table.plan tbody tr').allTextContents();
    const fits = await page.locator('#plan p.fits, #plan p.fits-not').textContent();
    await page.screenshot({ path: path.join(outDir, 'plan.png'), fullPage: true });
    check(planRows.length === 7 && /^params/.test(planRows[0]) && /MiB/.test(planRows[0]) &&
      /^state.*params \+ grads \+ optim = [\d.]+ MB/.test(planRows[5]) && /^Fits one RTX 4090/.test(fits) &&
      (await page.locator('#p-lab').inputValue()) === 'zero',
      'the planner page plans ZeRO-3 of GPT-2 on 8 GPUs, by category, totals the model state and says it fits an RTX 4090: ' +
      fits + '; ' + planRows[5]);
    // The ZeRO paper's figure 1 (7.5B parameters on 64 GPUs, mixed precision): the four stages
    // by the paper's names and figures, the stage planned marked, the symbols defined as the
    // terminal defines them; the form styled as the site's (the accent button, rounded fields);
    // on a phone's width the page does not scroll sideways (the tables scroll by themselves).
    await page.goto(new URL('/plan?lab=zero&n=64&psi=7.5B&mixed=on&stage=3', url).href);
    const stageRows = await page.locator('#plan table.plan-stages tbody tr').allTextContents();
    const current = await page.locator('#plan table.plan-stages tr.current').textContent();
    const terms = await page.locator('#plan dl.plan-terms dt').allTextContents();
    const psiPrime = await page.locator('#plan dl.plan-terms dt:text-is("Psi\'") + dd').textContent();
    const looks = await page.evaluate(() => {
      const button = getComputedStyle(document.querySelector('#plan-form button'));
      const input = getComputedStyle(document.querySelector('#p-n'));
      const accent = getComputedStyle(document.documentElement).getPropertyValue('--accent').trim();
      return { button: button.backgroundColor, radius: input.borderTopLeftRadius, accent };
    });
    const rgb = (hex) => 'rgb(' + [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)).join(', ') + ')';
    await page.screenshot({ path: path.join(outDir, 'plan-paper.png'), fullPage: true });
    const paper = ['baseline DDP', '120 GB', 'P_os', '31.4 GB', 'P_os+g', '16.6 GB', 'P_os+g+p', '1.88 GB'];
    check(stageRows.length === 4 && [0, 1, 2, 3].every((k) => stageRows[k].includes(paper[2 * k]) &&
      stageRows[k].includes(paper[2 * k + 1])) && /^3P_os\+g\+p \(this plan\)/.test(current) &&
      terms.includes("Psi'") && terms.includes('GiB, GB') && /64 equal shards/.test(psiPrime) &&
      looks.button === rgb(looks.accent) && looks.radius === '6px',
      'the planner shows the ZeRO paper\'s figure 1 (' + stageRows.map((r) => r.replace(/\s+/g, ' ')).join(' | ') +
      '), stage 3 marked, ' + terms.length + ' symbols defined, the form in the site\'s style (' + looks.button + ')');
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
    await phone.goto(new URL('/plan?lab=zero&n=64&psi=7.5B&mixed=on&stage=3', url).href);
    const wide = await phone.evaluate(() => document.documentElement.scrollWidth);
    await phone.screenshot({ path: path.join(outDir, 'plan-narrow.png'), fullPage: true });
    await phone.close();
    check(wide <= 390, 'the planner page fits a 390 px wide screen without scrolling sideways (' + wide + ' px)');
    // "Check it" runs the lab at a small shape (ZeRO-3 on 2 ranks, 2 steps) and shows, per rank,
    // what it measured beside the plan, every figure marked equal.
    await page.goto(new URL('/plan?lab=zero&n=2&stage=3', url).href);
    await page.click('#plan-check-form button');
    await page.waitForSelector('#plan-check-result table.check', { timeout: 60000 });
    const summary = await page.locator('#plan-check .check-summary').textContent();
    const marks = await page.locator('#plan-check-result td.mark').allTextContents();
    await page.locator('#plan-check').scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(outDir, 'plan-check.png'), fullPage: true });
    check(/^20 of 20 figures equal to the byte on cpu/.test(summary) && marks.length === 20 && marks.every((m) => m === '= equal'),
      'the planner\'s Check it runs ZeRO-3 on 2 ranks and marks all ' + marks.length + ' figures equal: ' + summary);
    // "Your TODO regions" on the ddp page: DDP's regions, the ring's and AdamW's; "Check them"
    // runs them and draws a row each, the failure with its message and what to reread.
    if (checks) {
      await page.goto(new URL('/labs/ddp', url).href);
      const before = await page.locator('#checks-table tbody tr').count();
      await page.click('#checks-form button');
      await page.waitForSelector('#checks-table tbody tr[data-status]', { timeout: 60000 });
      const rows = await page.locator('#checks-table tbody tr[data-status]').evaluateAll((trs) =>
        trs.map((tr) => tr.dataset.region + '=' + tr.dataset.status));
      const next = await page.locator('#checks-next').textContent();
      const message = await page.locator('#checks pre.check-message').allTextContents();
      const reread = await page.locator('#checks p.reread').allTextContents();
      check(before === 5 && rows.join(' ') === 'adamw=passed ring-reduce-scatter=passed ring-all-gather=failed ' +
        'ddp-buckets=not written yet ddp-overlap=not written yet' && message.length === 1 && /all-gather on \d+ ranks/.test(message[0]) &&
        /^reread: lesson 3/.test(reread[0] || '') && /2 passed, 1 failed, 2 not written yet/.test(next) &&
        /next: make check TODO=ring-all-gather/.test(next),
      '"Check them" on /labs/ddp draws a row per region: ' + rows.join(', ') + '; ' + next);
      // The status words in three colours, each apart from the page's background, light and dark.
      const colours = () => page.evaluate(() => {
        const of = (sel) => getComputedStyle(document.querySelector(sel)).color;
        return [of('#checks td.st-passed'), of('#checks td.st-failed'), of('#checks td.st-not-written-yet'),
          getComputedStyle(document.body).backgroundColor];
      });
      await page.locator('#checks').scrollIntoViewIfNeeded();
      const light = await colours();
      await page.locator('#checks').screenshot({ path: path.join(outDir, 'lab-checks.png') });
      await page.emulateMedia({ colorScheme: 'dark' });
      const dark = await colours();
      await page.locator('#checks').screenshot({ path: path.join(outDir, 'lab-checks-dark.png') });
      await page.emulateMedia({ colorScheme: 'light' });
      const apart = (c) => new Set(c).size === 4;
      check(apart(light) && apart(dark) && light[0] !== dark[0],
        `the statuses in three colours on the background, light (${light.join(' ')}) and dark (${dark.join(' ')})`);
    }
    check(errors.length === 0, 'no page logged an error: ' + JSON.stringify(errors));
    await busy.run(browser, path.resolve(shardlab), outDir, check);
  } finally {
    await browser.close();
    const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));
    server.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 5000))]);
    check(code === 0, 'the server stops on SIGTERM within 5 s, exit 0 (' + code + ')');
    if (code !== 0) server.kill('SIGKILL');
    fs.rmSync(runs, { recursive: true, force: true });
    fs.rmSync(checksDir, { recursive: true, force: true });
  }
}

main().catch((e) => { check(false, String(e).split('\n')[0]); }).finally(() => process.exit(failed ? 1 : 0));
