// lab.js — the lab form: starts a run through the server and opens its dashboard.
//
// Starting a run executes a program, so the server accepts it only with the token it printed
// at start-up (the page carries it in <meta name="shardlab-token"> when it was opened with
// ?token=...) and sends it back in a header: a header, unlike a form post, cannot be forged
// by another site's page. Without the token the form cannot work, and says why instead of
// failing with a bare 403.
'use strict';

(function () {
  const main = document.getElementById('lab');
  const form = document.getElementById('lab-form');
  const status = document.getElementById('lab-status');
  if (!main || !form || !status) return;

  const lab = main.dataset.lab;
  const tokenMeta = document.querySelector('meta[name="shardlab-token"]');
  const token = tokenMeta ? tokenMeta.content : '';
  const submit = form.querySelector('button[type="submit"], input[type="submit"], button:not([type])');

  function say(text, isError) {
    status.textContent = text;
    status.classList.toggle('error', !!isError);
    status.classList.remove('busy');
  }

  // 429: the server runs as many labs as it takes (shardlab web --max-runs), or this one would
  // not fit in memory beside them. Its reason, and a link to the run that holds the slot.
  function sayBusy(reply) {
    say(reply.error, false);
    status.classList.add('busy');
    if (reply.run) {
      const a = document.createElement('a');
      a.href = '/runs/' + encodeURIComponent(reply.run);
      a.textContent = 'Open run ' + reply.run;
      status.append(document.createElement('br'), a);
    }
  }

  const NO_TOKEN = 'This page cannot start runs: open it with the URL that shardlab web printed ' +
    'when it started (it ends in ?token=...).';

  if (!token) {
    say(NO_TOKEN, true);
  }

  // n and steps are the launcher's; every other named field is a lab option. Only fields the
  // student filled in are sent, so the lab's own defaults (its --help) apply to the rest.
  function body() {
    const out = { lab: lab }, options = {};
    for (const f of Array.from(form.elements)) {
      if (!f.name || f.disabled || f.type === 'submit' || f.type === 'button' || f.type === 'reset') continue;
      if (f.name === 'n' || f.name === 'steps') {
        const v = f.value.trim();
        if (v !== '') out[f.name] = Number(v);
        continue;
      }
      // Option values go as the student typed them (strings): the server turns each into
      // "--name value" for the lab, whose own parser checks and converts it.
      if (f.type === 'checkbox') {
        if (f.checked) options[f.name] = true;
      } else if (f.type === 'radio') {
        if (f.checked) options[f.name] = f.value;
      } else {
        const v = f.value.trim();
        if (v !== '') options[f.name] = v;
      }
    }
    out.options = options;
    return out;
  }

  async function start(e) {
    e.preventDefault();
    if (!token) {
      say(NO_TOKEN, true);
      return;
    }
    if (!form.reportValidity()) return;
    if (submit) submit.disabled = true;
    say('starting ' + lab + ' ...', false);
    try {
      const res = await fetch('/api/runs', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Shardlab-Token': token, Accept: 'application/json' },
        body: JSON.stringify(body()),
      });
      let reply = null;
      try {
        reply = await res.json();
      } catch (_) {
        // A reply that is not JSON still has a status code to report below.
      }
      if (res.status === 201 && reply && reply.id) {
        say('started ' + reply.id + '; opening its dashboard ...', false);
        window.location.assign('/runs/' + encodeURIComponent(reply.id));
        return;
      }
      if (res.status === 429 && reply && reply.error) {
        sayBusy(reply);
      } else {
        const why = reply && reply.error ? reply.error : 'the server answered HTTP ' + res.status;
        say(why, true);
      }
    } catch (err) {
      say('could not reach the server (' + err.message + '); is shardlab web still running?', true);
    }
    if (submit) submit.disabled = false;
  }

  // --ref: the finished runs this server knows, newest first, to draw beside the new one.
  // The run page's "compare" link names one in ?ref=, which comes selected.
  async function offerRuns(select) {
    const wanted = new URLSearchParams(window.location.search).get('ref') || '';
    let runs = [];
    try {
      const res = await fetch('/api/runs', { headers: { Accept: 'application/json' } });
      if (res.ok) runs = (await res.json()).runs || [];
    } catch (_) {
      // No list: the select keeps "(none)", and a wanted run is still offered below.
    }
    const finished = runs.filter((r) => r.status === 'ok' && r.lab !== 'collectives');
    if (wanted && !finished.some((r) => r.id === wanted)) finished.unshift({ id: wanted });
    // Compared with a run, the new one starts like it: its steps and ranks (the loss curves
    // then cover the same ground), unless the reader has changed them already.
    const ref = finished.find((r) => r.id === wanted && r.steps);
    for (const [name, value] of ref ? [['steps', ref.steps], ['n', ref.world]] : []) {
      const input = form.elements[name];
      if (input && input.value === input.defaultValue && value) input.value = String(value);
    }
    for (const r of finished) {
      const o = document.createElement('option');
      o.value = r.id;
      o.textContent = r.lab ? r.id + ' (' + r.lab + ', ' + r.world + ' rank' + (r.world === 1 ? '' : 's') + ', ' +
        r.last_step + ' steps, final loss ' + Number(r.loss).toFixed(4) + ')' : r.id;
      o.selected = r.id === wanted;
      select.append(o);
    }
  }
  for (const select of form.querySelectorAll('select[data-runs]')) offerRuns(select);

  // Options in the address (a lexicon term's Run link: /labs/zero?stage=3) fill their fields.
  for (const [name, value] of new URLSearchParams(window.location.search)) {
    const input = name !== 'ref' && form.elements[name];
    if (!input || input.tagName === 'FIELDSET') continue;
    if (input.type === 'checkbox') input.checked = value === '' || value === '1' || value === 'true';
    else input.value = value;
  }

  form.addEventListener('submit', start);
})();
