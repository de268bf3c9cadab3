// home.js — the home page's two live parts: the lexicon's instant search and the list of runs.
//
// The server renders everything else, so the page works without this script: the lexicon is
// then a plain list of links, and the runs are one click away under /runs. The search only
// hides what the server rendered; it never builds the list, so a term and its link exist
// once, in the HTML.
'use strict';

(function () {
  // ---------------------------------------------------------------- lexicon search

  const input = document.getElementById('lexicon-search');
  const section = document.getElementById('lexicon');

  function setupSearch() {
    if (!input || !section) return;
    const items = Array.from(section.querySelectorAll('li[data-search]'));
    // The haystack is the server's data-search (slug, title, other names) plus the link's own
    // text, lower-cased once: a search is then a few substring tests per term.
    const hay = items.map((li) => (li.dataset.search + ' ' + li.textContent).toLowerCase());
    // Each category is an <h3> followed by its <ul>; an emptied category hides its heading too,
    // or the page would show headings over nothing.
    const lists = Array.from(section.querySelectorAll('ul')).filter((ul) => ul.querySelector('li[data-search]'));
    const headingOf = (ul) => {
      let h = ul.previousElementSibling;
      while (h && !/^H[2-6]$/.test(h.tagName) && h.tagName !== 'UL') h = h.previousElementSibling;
      return h && h.tagName !== 'UL' ? h : null;
    };

    // One line under the box says what the filter did; screen readers hear it (polite, so it
    // does not interrupt typing). It is created here because only the script needs it.
    const note = document.createElement('p');
    note.id = 'lexicon-none';
    note.className = 'muted';
    note.setAttribute('role', 'status');
    note.setAttribute('aria-live', 'polite');
    input.insertAdjacentElement('afterend', note);
    if (!input.getAttribute('aria-describedby')) input.setAttribute('aria-describedby', note.id);

    let first = null;  // the first visible match: what Enter opens

    function filter() {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      let shown = 0;
      first = null;
      items.forEach((li, i) => {
        const match = words.every((w) => hay[i].includes(w));
        li.hidden = !match;
        li.classList.remove('first-match');
        if (match) {
          shown++;
          if (!first) first = li;
        }
      });
      for (const ul of lists) {
        const empty = !ul.querySelector('li[data-search]:not([hidden])');
        ul.hidden = empty;
        const h = headingOf(ul);
        if (h) h.hidden = empty;
      }
      if (words.length === 0) {
        note.textContent = '';
      } else if (shown === 0) {
        note.textContent = 'no term matches \u201c' + input.value.trim() + '\u201d';
      } else {
        first.classList.add('first-match');
        note.textContent = shown + (shown === 1 ? ' term matches' : ' terms match') + '; Enter opens the first';
      }
    }

    input.addEventListener('input', filter);
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        const a = first && first.querySelector('a[href]');
        if (a && input.value.trim()) window.location.href = a.href;
      } else if (e.key === 'Escape' && input.value) {
        input.value = '';
        filter();
      }
    });
    // A search typed before the script ran, or restored by the back button, applies at once.
    if (input.value) filter();
  }

  // ---------------------------------------------------------------- runs

  const runList = document.getElementById('run-list');
  const POLL_MS = 5000;
  let lastJson = '';

  // "start" may come as an ISO string or a Unix time in s, ms or us; all read as local time.
  function startDate(v) {
    if (v == null || v === '') return null;
    if (typeof v === 'number') {
      const ms = v > 1e14 ? v / 1000 : v > 1e11 ? v : v * 1000;
      return new Date(ms);
    }
    const d = new Date(v);
    return isNaN(d) ? null : d;
  }

  function when(v) {
    const d = startDate(v);
    if (!d) return '';
    const pad = (n) => String(n).padStart(2, '0');
    const day = d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
    return day + ' ' + pad(d.getHours()) + ':' + pad(d.getMinutes());
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  // unlisted: directories with a run's log whose names are not run ids (the server serves
  // only letters, digits, '-', '_' and '.'): said once, so a run copied in under such a name
  // is not silently missing.
  function renderRuns(runs, unlisted) {
    runList.textContent = '';
    if (unlisted > 0) {
      runList.appendChild(el('li', 'empty', unlisted + (unlisted === 1 ? ' directory' : ' directories') +
        ' in the runs folder ' + (unlisted === 1 ? 'is' : 'are') + ' not listed: a run\u2019s name may hold only ' +
        'letters, digits, - _ and . (rename it to see it here).'));
    }
    if (!runs.length && !unlisted) {
      runList.appendChild(el('li', 'empty', 'No runs yet: start one from a lab below, or with shardlab run.'));
      return;
    }
    for (const r of runs) {
      const li = el('li');
      const a = el('a', 'run-id', r.id);
      a.href = '/runs/' + encodeURIComponent(r.id);
      const first = el('span');
      first.appendChild(a);
      li.appendChild(first);
      li.appendChild(el('span', null, r.lab + ' \u00d7' + r.world));
      // The status is a word; the colour class only repeats it.
      li.appendChild(el('span', 'st-' + r.status, r.status));
      // How far it got, or why it has no steps: it stopped before it started (its page says
      // why), or its lab trains nothing (collectives measures the collectives).
      const done = Math.max(r.last_step || 0, 0);
      let steps = r.steps ? done + ' / ' + r.steps + ' steps' : done + ' steps';
      let loss = typeof r.loss === 'number' && done > 0 ? 'loss ' + r.loss.toFixed(4) : '';
      if (r.started === false) steps = r.status === 'running' ? 'starting' : 'did not start', loss = '';
      else if (r.trains === false) steps = 'no training steps', loss = '';
      li.appendChild(el('span', 'num', steps));
      li.appendChild(el('span', 'num', loss));
      const t = el('span', 'muted num', when(r.start));
      li.appendChild(t);
      runList.appendChild(li);
    }
  }

  async function pollRuns() {
    // A background tab has nobody to show runs to; the visibility handler polls on return.
    if (document.hidden) return;
    try {
      const res = await fetch('/api/runs', { headers: { Accept: 'application/json' } });
      if (!res.ok) throw new Error('HTTP ' + res.status);
      const text = await res.text();
      // Rebuilding an unchanged list would drop the keyboard focus from a link every 5 s.
      if (text === lastJson) return;
      lastJson = text;
      const list = JSON.parse(text);
      renderRuns(list.runs || [], list.unlisted || 0);
    } catch (err) {
      lastJson = '';
      runList.textContent = '';
      runList.appendChild(el('li', 'error', 'Could not load the runs (' + err.message + '); trying again in 5 s.'));
    }
  }

  function setupRuns() {
    if (!runList) return;
    runList.setAttribute('aria-busy', 'true');
    pollRuns().then(() => runList.removeAttribute('aria-busy'));
    setInterval(pollRuns, POLL_MS);
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) pollRuns();
    });
  }

  setupSearch();
  setupRuns();
})();
