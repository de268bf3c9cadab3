// post.js — what the pages' buttons that run something on this machine share: the planner's
// "Check it" (plan.js) and a lab page's "Check them" (checks.js). shardlab.el() makes an
// element; shardlab.post() wires a form: on submit it POSTs to the form's action with the
// token the server printed at start-up (in a header, as the lab form sends it), holds the
// button and marks `busy` while the server works, then draws the reply, or says what went
// wrong in the form's status element. Without a token it says why at once.
'use strict';

window.shardlab = window.shardlab || {};

shardlab.el = function (tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
};

// opts: form, status (the element that says what is going on), busy (marked aria-busy meanwhile),
// busyText, noToken (what to say without the token), good(reply) (a reply worth drawing),
// draw(reply).
shardlab.post = function (opts) {
  const tokenMeta = document.querySelector('meta[name="shardlab-token"]');
  const token = tokenMeta ? tokenMeta.content : '';
  const button = opts.form.querySelector('button');

  function say(text, isError) {
    opts.status.textContent = text;
    opts.status.classList.toggle('error', !!isError);
  }

  async function submit(e) {
    e.preventDefault();
    if (!token) { say(opts.noToken, true); return; }
    button.disabled = true;
    opts.busy.setAttribute('aria-busy', 'true');
    say(opts.busyText, false);
    let res = null, reply = null;
    try {
      res = await fetch(opts.form.getAttribute('action'), {
        method: 'POST',
        headers: { 'X-Shardlab-Token': token, Accept: 'application/json' },
      });
      try { reply = await res.json(); } catch (_) { /* the status code says enough */ }
    } catch (err) {
      reply = { error: 'could not reach the server (' + err.message + '); is shardlab web still running?' };
    }
    opts.busy.removeAttribute('aria-busy');
    button.disabled = false;
    if (res && res.ok && reply && opts.good(reply)) {
      say('', false);
      opts.draw(reply);
      return;
    }
    say((reply && reply.error) || 'the server answered HTTP ' + (res ? res.status : '?'), true);
  }

  if (!token) say(opts.noToken, true);
  opts.form.addEventListener('submit', submit);
};
