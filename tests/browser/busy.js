// busy.js — the lab form and the run page when a run cannot go ahead, in a real browser. Its
// servers are its own (shardlab web), so that what holds them busy is known:
//   - one whose labs are stand-ins (SHARDLAB_LABS), as tests/test_web.c has them: single
//     sleeps (a run that holds the one slot and takes no memory), ddp fails at start as a
//     rank on a full disk does (/dev/full refuses its write);
//   - one whose runs folder is a full disk: a 64 KiB tmpfs filled up, in a mount namespace
//     of the server's own (unshare -m; -rm without root), the real labs. Where unshare is
//     not allowed, it is skipped, and says so.
//
// Usage: node tests/browser/busy.js SHARDLAB OUT_DIR     (e2e.js runs it too)
//   SHARDLAB  build/shardlab;  OUT_DIR  where the screenshots go
//
// Prints "ok - ..." / "not ok - ..." lines. What it proves:
//   0. a directory in the runs folder whose name is no run id is not listed, and the home
//      page says so and why (screenshot home-unlisted.png);
//   1. with a run going on, the form's start is refused (429) and the form says so as
//      "Busy: ...", the limit named, with a link to the run that holds the slot; nothing is
//      started (screenshot web-429.png) (broken variant: no --max-runs, the form lands on a
//      second run's page);
//   2. once that run has ended, the same form starts the lab;
//   3. a run whose ranks fail at start ends with the status error on its page, never
//      "running", with why: the ranks' reason where they could log it, the launcher's own
//      words on a full disk, where no rank can write a line (screenshot run-disk-full.png)
//      (broken variant: the launcher's output thrown away, its failure called "stopped").
'use strict';
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

// `shardlab web` started by argv (through a shell for the full disk), its URL with the token.
async function startServer(argv, env) {
  const server = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } });
  const url = await new Promise((resolve) => {
    let text = '';
    const t = setTimeout(() => resolve(null), 20000);
    server.stdout.on('data', (d) => {
      text += d;
      const m = text.match(/open (http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]+)/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
    server.on('exit', () => { clearTimeout(t); resolve(null); });
  });
  return { server, url };
}

async function stopServer(server) {
  if (server.exitCode !== null || server.signalCode !== null) return;
  const exited = new Promise((resolve) => server.on('exit', resolve));
  server.kill('SIGTERM');
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
  if (server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
}

async function statusOf(url, id) {
  const res = await fetch(new URL('/api/runs/' + id, url));
  return res.ok ? (await res.json()).status : 'HTTP ' + res.status;
}

// A page that records what it logs as errors, but the one a refused start is expected to log.
async function newPage(browser) {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  page.errors = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const refusal = / 429 /.test(m.text()) && /\/api\/runs$/.test((m.location() || {}).url || '');
    if (!refusal) page.errors.push(m.text());
  });
  page.on('pageerror', (e) => page.errors.push(String(e)));
  return page;
}

async function submitForm(page, url, lab, fields) {
  await page.goto(new URL('/labs/' + lab, url).href);
  await page.waitForSelector('#lab-form');
  for (const [name, value] of Object.entries(fields)) await page.fill(`input[name="${name}"]`, value);
  await page.click('button[type=submit]');
}

async function busyAndFailing(browser, shardlab, outDir, check, dir) {
  const labs = path.join(dir, 'labs'), runs = path.join(dir, 'runs');
  fs.mkdirSync(labs);
  fs.mkdirSync(runs);
  fs.writeFileSync(path.join(labs, 'single'), '#!/bin/sh\nexec sleep 6\n', { mode: 0o755 });
  fs.writeFileSync(path.join(labs, 'ddp'), "#!/bin/sh\necho step > /dev/full 2>/dev/null || " +
    "{ echo 'cannot write its log: No space left on device' >&2; exit 1; }\n", { mode: 0o755 });
  const { server, url } = await startServer([shardlab, 'web', '--port', '0', '--runs', runs], { SHARDLAB_LABS: labs });
  check(!!url, 'busy: a server with stand-in labs starts');
  if (!url) return;
  try {
    const token = new URL(url).searchParams.get('token');
    const res = await fetch(new URL('/api/runs', url), {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Shardlab-Token': token },
      body: JSON.stringify({ lab: 'single', n: 1, steps: 1 }),
    });
    const holder = res.status === 201 ? (await res.json()).id : '';
    check(!!holder, 'busy: a run that holds the one slot starts (HTTP ' + res.status + ')');
    const page = await newPage(browser);
    // A run copied in under a name that is no run id (a quote and a space): the home page says
    // it is not listed, and why, rather than leaving it out silently or linking it to a 404.
    const odd = path.join(runs, 'my "best" run');
    fs.mkdirSync(odd);
    fs.writeFileSync(path.join(odd, 'rank-0.jsonl'), '{"ev":"start","rank":0,"world":1,"lab":"ddp"}\n');
    await page.goto(url);  // (the token's cookie)
    await page.waitForSelector('#run-list li a.run-id', { timeout: 10000 });
    const list = await page.locator('#run-list').textContent();
    await page.locator('#runs').screenshot({ path: path.join(outDir, 'home-unlisted.png') }).catch(() => {});
    check(/1 directory in the runs folder is not listed: a run\u2019s name may hold only letters, digits, - _ and \./.test(list) &&
      !list.includes('best') && list.includes(holder), 'the home page lists the run and says one directory is not listed, ' +
      'and why: ' + list.slice(0, 200));
    fs.rmSync(odd, { recursive: true });
    await submitForm(page, url, 'ddp', { n: '2', steps: '5' });
    await page.waitForSelector('#lab-status.busy', { timeout: 15000 });
    const said = await page.locator('#lab-status').textContent();
    const link = await page.locator('#lab-status a').getAttribute('href');
    const prefix = await page.evaluate(() => getComputedStyle(document.querySelector('#lab-status'), '::before').content);
    await page.locator('#lab-status').scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(outDir, 'web-429.png') });
    check(/one lab at a time/.test(said) && said.includes(holder) && /--max-runs 2/.test(said) &&
      link === '/runs/' + holder && prefix === '"Busy: "' && /\/labs\/ddp$/.test(page.url()) &&
      fs.readdirSync(runs).length === 1,
      `busy: the form says "Busy:" and why, with a link to the run that holds the slot, and starts nothing: ${said} (${link})`);
    // The stand-in sleeps 6 s; then the slot is free, and the same form starts the lab.
    let st = 'running';
    for (let t = 0; t < 100 && st === 'running'; t++) {
      st = await statusOf(url, holder);
      if (st === 'running') await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await page.click('button[type=submit]');
    await page.waitForURL(/\/runs\//, { timeout: 15000 });
    check(st !== 'running', `busy: once that run has ended (${st}), the form starts the lab and opens its page`);
    await page.waitForSelector('#run-status .st-error', { timeout: 30000 });
    const errors = await page.locator('.run-errors').textContent();
    check(/No space left on device/.test(errors) && !(await page.locator('#run-status .st-running').count()),
      'a run whose ranks fail at start: its page says error, with their reason: ' + errors.slice(0, 200));
    check(page.errors.length === 0, 'busy: the pages logged no error: ' + JSON.stringify(page.errors));
    await page.close();
  } finally {
    await stopServer(server);
  }
}

async function diskFull(browser, shardlab, outDir, check, dir) {
  const mnt = path.join(dir, 'full');
  fs.mkdirSync(mnt);
  const script = `mount -t tmpfs -o size=64k shardlab-full '${mnt}' && mkdir '${mnt}/runs' && ` +
    `{ dd if=/dev/zero of='${mnt}/fill' bs=4k 2>/dev/null; true; } && exec '${shardlab}' web --port 0 --runs '${mnt}/runs'`;
  const unshare = ['/usr/bin/unshare', process.getuid() === 0 ? '-m' : '-rm', 'sh', '-c', script];
  const { server, url } = fs.existsSync(unshare[0]) ? await startServer(unshare, {}) : { server: null, url: null };
  if (!url) {
    console.log('# skipped: a run on a full disk needs unshare -m (or -rm), which is not allowed here');
    if (server) await stopServer(server);
    return;
  }
  try {
    const page = await newPage(browser);
    await page.goto(url);
    await submitForm(page, url, 'ddp', { n: '2', steps: '5' });
    await page.waitForURL(/\/runs\//, { timeout: 15000 });
    await page.waitForSelector('#run-status .st-error', { timeout: 30000 });
    await page.waitForSelector('.run-errors pre', { timeout: 10000 });
    const head = await page.locator('.run-errors h2').textContent();
    const words = await page.locator('.run-errors pre').textContent();
    await page.screenshot({ path: path.join(outDir, 'run-disk-full.png') });
    check(/What the launcher said \(exit status 1\)/.test(head) && /No space left on device/.test(words) &&
      /HINT: is the disk full\?/.test(words),
      `a run on a full disk: its page says error and shows the launcher's words (${head}: ${words.replace(/\n/g, ' | ').slice(0, 240)})`);
    check(page.errors.length === 0, 'full disk: the page logged no error: ' + JSON.stringify(page.errors));
    await page.close();
  } finally {
    await stopServer(server);
  }
}

async function run(browser, shardlab, outDir, check) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlab-browser-busy-'));
  try {
    await busyAndFailing(browser, shardlab, outDir, check, dir);
    await diskFull(browser, shardlab, outDir, check, dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

module.exports = { run };

if (require.main === module) {
  const { chromium } = require('playwright-core');
  const [shardlab, outDir] = process.argv.slice(2);
  let failed = 0;
  const check = (ok, what) => {
    console.log((ok ? 'ok - ' : 'not ok - ') + 'browser: ' + what);
    if (!ok) failed++;
  };
  (async () => {
    fs.mkdirSync(outDir, { recursive: true });
    const browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
    try {
      await run(browser, path.resolve(shardlab), outDir, check);
    } finally {
      await browser.close();
    }
  })().catch((e) => check(false, String(e).split('\n')[0])).finally(() => process.exit(failed ? 1 : 0));
}
