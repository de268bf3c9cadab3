// math.js — the formulas of the lexicon and the lessons, drawn as mathematics.
//
// A ```formula block in a term or a lesson holds one `name = expression` a line, in the plain
// arithmetic that tests/test_lexicon.c evaluates against the labs: `bubble = (p-1)/(m+p-1)`.
// The terminal (`shardlab lexicon`) shows those lines as they are. Here each line is parsed
// by the small recursive-descent parser below, written as TeX, and drawn by KaTeX (Debian's
// libjs-katex, which shardlab serves at /static/katex/) where the <pre> was; the plain text
// stays one click away, under "plain text", to copy.
//
// The grammar of a line:
//   line    = name "=" sum
//   sum     = product (("+" | "-") product)*
//   product = unary (("*" | "/") unary)*
//   unary   = "-" unary | power
//   power   = atom ("^" unary)?
//   atom    = number | name | name "(" sum ("," sum)* ")" | "(" sum ")"
//
// How it is written, one rule for each thing so that every formula reads alike:
//   names   A Greek letter's name is the letter: alpha -> \alpha, Psi -> \Psi. One letter is
//           itself (B, p). Capitals are one italic symbol: NH -> \mathit{NH}. A name with a
//           lowercase letter is words: algbw -> \text{algbw}.
//           With underscores: when the part before the first one is a symbol (one letter, a
//           Greek name, capitals), the rest is its subscript: t_F -> t_{F}, Psi_split ->
//           \Psi_{\text{split}}, t_ring -> t_{\text{ring}}. Otherwise the whole name is words,
//           an underscore a space and a run of numbers a list: bytes_sent_per_rank ->
//           \text{bytes sent per rank}, bytes_sent_stages_0_1_2 -> \text{bytes sent stages 0, 1, 2}.
//   a/b     \frac{a}{b}. In a product, "/" divides the factors written since the previous
//           division, and a "/" right after another joins its denominator:
//           2*(N-1)/N*S/beta -> \frac{2(N-1)}{N}\frac{S}{\beta}, a/b/c -> \frac{a}{bc}.
//   a*b     Side by side (4*Psi -> 4\Psi, B*T -> BT), with \cdot where side by side would
//           misread: before a number (algbw*2 -> \text{algbw} \cdot 2), between a number and a
//           fraction after it (4 \cdot \frac{B}{Nm}, not a mixed number), and next to a
//           multi-letter name (N \cdot \text{peak flops}, B \cdot \mathit{NH}).
//   ( )     Kept where precedence needs them (a sum in a product, after "-" or negated; a
//           negative after an operator or inside a product; anything but a name or a number
//           as a power's base), dropped elsewhere: around a numerator, a denominator, an
//           argument, an exponent. \left( \right) when they hold a fraction.
//   x^2     x^{2};  sqrt(x) -> \sqrt{x};  min, max, log, ln, exp -> \min(...) and so on;
//           any other function -> \operatorname{name}(...).
//
// Nothing here may break a page: if KaTeX did not load, or a line does not parse or does not
// render, its block stays the plain <pre> it was, and the console says why, once.
//
// In node (tests/browser/formulas.js): require() it for toTex(); nothing is drawn.
'use strict';
(function () {
  // ---- the parser: a line into a tree -------------------------------------------------

  function tokenize(line) {
    const tokens = [];
    const re = /\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|([-+*/^(),=]))/y;
    let at = 0;
    while (at < line.length) {
      if (/^\s*$/.test(line.slice(at))) break;
      re.lastIndex = at;
      const m = re.exec(line);
      if (!m) {
        const col = at + line.slice(at).search(/\S/);
        throw new Error(`unexpected "${line[col]}" at column ${col + 1}`);
      }
      tokens.push(m[1] !== undefined ? { num: m[1] } : m[2] !== undefined ? { name: m[2] } : { op: m[3] });
      at = re.lastIndex;
    }
    return tokens;
  }

  // Nodes: {num}, {name}, {call, args}, {group: node} (written in parentheses), {neg: node},
  // {pow: [base, exponent]}, {sum: [first, [op, node]...]}, {product: [first, [op, node]...]}.
  function parse(line) {
    const t = tokenize(line);
    let i = 0;
    const peek = () => t[i] || {};
    const isOp = (op) => peek().op === op;
    const expect = (op) => {
      if (!isOp(op)) throw new Error(`expected "${op}" ${i < t.length ? 'before token ' + (i + 1) : 'at the end'}`);
      i++;
    };
    function chain(kind, ops, next) {
      const first = next(), rest = [];
      while (ops.includes(peek().op)) rest.push([t[i++].op, next()]);
      return rest.length ? { [kind]: [first, ...rest] } : first;
    }
    const sum = () => chain('sum', ['+', '-'], product);
    const product = () => chain('product', ['*', '/'], unary);
    function unary() {
      if (isOp('-')) { i++; return { neg: unary() }; }
      const base = atom();
      if (!isOp('^')) return base;
      i++;
      return { pow: [base, unary()] };
    }
    function atom() {
      const tok = t[i++] || {};
      if (tok.num !== undefined) return { num: tok.num };
      if (tok.name !== undefined) {
        if (!isOp('(')) return { name: tok.name };
        i++;
        const args = [sum()];
        while (isOp(',')) { i++; args.push(sum()); }
        expect(')');
        return { call: tok.name, args };
      }
      if (tok.op === '(') {
        const inner = sum();
        expect(')');
        return { group: inner };
      }
      throw new Error(tok.op ? `unexpected "${tok.op}"` : 'an expression ends too soon');
    }
    const lhs = t[i++] || {};
    if (lhs.name === undefined) throw new Error('a formula line starts with its name');
    expect('=');
    const rhs = sum();
    if (i < t.length) throw new Error(`unexpected "${t[i].op || t[i].name || t[i].num}" after the expression`);
    return { lhs: lhs.name, rhs };
  }

  // ---- names ---------------------------------------------------------------------------

  const GREEK = new Set(['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta', 'iota', 'kappa',
    'lambda', 'mu', 'nu', 'xi', 'pi', 'rho', 'sigma', 'tau', 'upsilon', 'phi', 'chi', 'psi', 'omega',
    'Gamma', 'Delta', 'Theta', 'Lambda', 'Xi', 'Pi', 'Sigma', 'Upsilon', 'Phi', 'Psi', 'Omega']);
  const FUNCTIONS = new Set(['min', 'max', 'log', 'ln', 'exp']);

  const isSymbol = (s) => /^[A-Za-z]$/.test(s) || GREEK.has(s) || /^[A-Z][A-Z0-9]*$/.test(s);
  function symbolTex(s) {
    if (GREEK.has(s)) return '\\' + s;
    return s.length === 1 ? s : `\\mathit{${s}}`;
  }
  // Words: underscores as spaces, a run of numbers as a list ("stages 0, 1, 2").
  function words(parts) {
    return parts.reduce((text, p, k) => text + (k === 0 ? '' : /^\d+$/.test(p) && /^\d+$/.test(parts[k - 1]) ? ', ' : ' ') + p, '');
  }

  // A name as TeX, and whether it reads as more than one letter (then \cdot keeps it apart).
  function nameTex(name) {
    const parts = name.split('_').filter((p) => p !== '');
    if (parts.length === 0) throw new Error(`"${name}" is no name`);
    const base = parts[0], rest = parts.slice(1);
    if (!isSymbol(base)) return { tex: `\\text{${words(parts)}}`, long: true };
    const tex = symbolTex(base);
    const long = tex.startsWith('\\mathit');
    if (rest.length === 0) return { tex, long };
    let sub;
    if (rest.length === 1 && /^([A-Za-z]|\d+)$/.test(rest[0])) sub = rest[0];
    else if (rest.length === 1 && GREEK.has(rest[0])) sub = '\\' + rest[0];
    else sub = `\\text{${words(rest)}}`;
    return { tex: `${tex}_{${sub}}`, long };
  }

  // ---- the tree as TeX -------------------------------------------------------------------
  // Each piece is {tex, first, last}: what it begins and ends with, for the product's joins:
  // 'digit', 'long' (a multi-letter name), 'frac' (last only) or 'other'.

  const unwrap = (n) => (n.group ? unwrap(n.group) : n);

  function paren(p) {
    const tex = /\\frac/.test(p.tex) ? `\\left(${p.tex}\\right)` : `(${p.tex})`;
    return { tex, first: 'other', last: 'other' };
  }

  // Where a node stands decides whether it needs parentheses around it.
  function needsParens(n, where) {
    if (where === 'factor') return !!(n.sum || n.neg);
    if (where === 'firstFactor') return !!n.sum;
    if (where === 'afterMinus' || where === 'negated') return !!(n.sum || n.neg);
    if (where === 'afterPlus') return !!n.neg;
    if (where === 'base') return !(n.num !== undefined || n.name !== undefined);
    return false;  // 'alone': a whole side, a numerator, a denominator, an argument, an exponent
  }

  function render(node, where) {
    const n = unwrap(node);
    const p = renderBare(n);
    // (A product that begins with a minus, -a*b, after an operator or in a product, too.)
    const minusFirst = p.tex.startsWith('-') && ['factor', 'afterPlus', 'afterMinus', 'negated'].includes(where);
    return needsParens(n, where) || minusFirst ? paren(p) : p;
  }

  function renderBare(n) {
    if (n.num !== undefined) return { tex: n.num, first: 'digit', last: 'digit' };
    if (n.name !== undefined) {
      const { tex, long } = nameTex(n.name);
      const kind = long ? 'long' : 'other';
      return { tex, first: kind, last: kind };
    }
    if (n.call !== undefined) {
      const args = n.args.map((a) => render(a, 'alone').tex);
      if (n.call === 'sqrt') {
        if (args.length !== 1) throw new Error('sqrt takes one argument');
        return { tex: `\\sqrt{${args[0]}}`, first: 'other', last: 'other' };
      }
      const fn = FUNCTIONS.has(n.call) ? '\\' + n.call : `\\operatorname{${n.call.replace(/_/g, '\\_')}}`;
      const inside = args.join(', ');
      const tex = /\\frac/.test(inside) ? `${fn}\\left(${inside}\\right)` : `${fn}(${inside})`;
      return { tex, first: 'long', last: 'other' };
    }
    if (n.neg) {
      const p = render(n.neg, 'negated');
      return { tex: '-' + p.tex, first: 'other', last: p.last };
    }
    if (n.pow) {
      const base = render(n.pow[0], 'base');
      return { tex: `${base.tex}^{${render(n.pow[1], 'alone').tex}}`, first: base.first, last: 'other' };
    }
    if (n.sum) {
      let tex = render(n.sum[0], 'alone').tex;
      for (const [op, term] of n.sum.slice(1)) tex += ` ${op} ${render(term, op === '-' ? 'afterMinus' : 'afterPlus').tex}`;
      return { tex, first: 'other', last: 'other' };
    }
    if (n.product) return renderProduct(n.product);
    throw new Error('unknown node');
  }

  // Factors side by side, or with \cdot where side by side would misread (see the top).
  function join(pieces) {
    let out = pieces[0];
    for (const p of pieces.slice(1)) {
      const cdot = p.first === 'digit' || p.first === 'long' || out.last === 'long' ||
        (out.last === 'digit' && /^\\frac/.test(p.tex));
      let sep = cdot ? ' \\cdot ' : '';
      if (!cdot && /\\[A-Za-z]+$/.test(out.tex) && /^[A-Za-z]/.test(p.tex)) sep = ' ';  // \Psi N, not \PsiN
      out = { tex: out.tex + sep + p.tex, first: out.first, last: p.last };
    }
    return out;
  }

  // A product: runs of factors, each run over the factors that divide it.
  function renderProduct(items) {
    const runs = [];
    let run = { num: [items[0]], den: [] };
    for (const [op, f] of items.slice(1)) {
      if (op === '/') run.den.push(f);
      else if (run.den.length) runs.push(run), run = { num: [f], den: [] };
      else run.num.push(f);
    }
    runs.push(run);
    const side = (factors) => factors.length === 1 ? render(factors[0], 'alone')
      : join(factors.map((f, k) => render(f, k === 0 ? 'firstFactor' : 'factor')));
    const pieces = runs.map((r, k) => {
      if (r.den.length) return { tex: `\\frac{${side(r.num).tex}}{${side(r.den).tex}}`, first: 'other', last: 'frac' };
      return join(r.num.map((f, j) => render(f, k === 0 && j === 0 ? 'firstFactor' : 'factor')));
    });
    return join(pieces);
  }

  // One line of a formula block as TeX; throws with the reason when it does not parse.
  function toTex(line) {
    const { lhs, rhs } = parse(line);
    return `${nameTex(lhs).tex} = ${render(rhs, 'alone').tex}`;
  }

  // ---- the page ----------------------------------------------------------------------------

  const api = { toTex, parse };
  if (typeof module !== 'undefined' && module.exports) module.exports = api;
  if (typeof document === 'undefined') return;
  window.shardlabMath = api;

  let warned = false;
  function warn(why) {
    if (!warned) console.warn('math.js: formulas left as plain text: ' + why);
    warned = true;
  }

  // Each block's <pre> becomes its lines drawn, the <pre> folded under "plain text"; a block
  // whose every line does not convert and draw is left as it was.
  function renderFormulas(root) {
    const blocks = Array.from(root.querySelectorAll('pre > code.language-formula'));
    if (blocks.length === 0) return;
    if (!window.katex || typeof window.katex.render !== 'function') return warn('KaTeX did not load');
    for (const code of blocks) {
      const pre = code.parentElement;
      const lines = code.textContent.split('\n').map((l) => l.trim()).filter((l) => l !== '');
      if (lines.length === 0) continue;
      const box = document.createElement('div');
      box.className = 'formula';
      try {
        for (const line of lines) {
          const el = document.createElement('div');
          el.className = 'formula-line';
          window.katex.render(toTex(line), el, { displayMode: true, throwOnError: true });
          box.appendChild(el);
        }
      } catch (e) {
        warn(e.message);
        continue;
      }
      const plain = document.createElement('details');
      plain.className = 'formula-plain';
      const summary = document.createElement('summary');
      summary.textContent = 'plain text';
      plain.appendChild(summary);
      pre.replaceWith(box);
      plain.appendChild(pre);
      box.appendChild(plain);
    }
  }
  api.renderFormulas = renderFormulas;
  renderFormulas(document);
})();
