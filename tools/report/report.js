// report.js: the page of `retain-diff --html` (tools/report/report.html).
// It reads the JSON retain-diff embeds (<script type="application/json"
// id="retain-data">: the document `--json --top 0` prints) and draws it:
//
//   retain-trend/1  per-request retention curves stacked by owner (or
//                   category), the RSS / RssAnon+VmSwap / tracked /
//                   allocator-held lines, one panel per device, verdict
//                   badges, a hover that names the requests of each point;
//   retain-diff/1   (live, exact, aggregate) the RSS explanation as a bar,
//                   an icicle of bytes by stack (zoom, search, measure);
//   both            the owner table as retain-diff prints it, sortable,
//                   each owner expandable to its whole stack.
//
// The project's own code, no library: the page must open from disk with no
// network at all (report.html's Content-Security-Policy forbids every
// fetch), and what it needs (scales, ticks, stacking, an icicle, a table) is
// a few hundred lines, smaller than any charting package.
//
// Two halves. The first is pure functions over numbers and the JSON, with
// no DOM: node loads this file (`require`) and tests/js/ tests them. The
// second draws with the DOM and runs only in a page that holds the data.
// Numbers are written as the tool writes them (tools/lib/byte_size.cc,
// diff_format.cc): "4.0 MiB", "+4.0 MiB/request (fit 1.00)".
//
// Single-threaded (a page's script); nothing is logged to the console.
(function (global) {
  'use strict';

  // ---------------------------------------------------------------------
  // Numbers as the tool writes them.

  // x.toFixed(digits), but an exact tie rounds to even as C's printf does
  // ("%.1f" of 1.25 is "1.2"; JavaScript's toFixed says "1.3"). A double's
  // decimal expansion is finite; 25 more digits than asked reach its end
  // for every value this page formats (a tie is a multiple of 2^-k >= 0.005),
  // so a trailing "5000..." there is a true tie.
  function toFixedEven(x, digits) {
    if (!isFinite(x)) return String(x);
    const negative = x < 0 || Object.is(x, -0);
    const magnitude = Math.abs(x);
    const long = magnitude.toFixed(Math.min(100, digits + 25));
    const point = long.indexOf('.');
    const rest = long.slice(point + 1 + digits);
    let text;
    if (/^50*$/.test(rest)) {
      // A tie: keep the digits, add one in the last place if it is odd.
      const kept = long.slice(0, point + 1 + digits).replace(/\.$/, '');
      const lastDigit = Number(kept.charAt(kept.length - 1));
      if (lastDigit % 2 === 0) {
        text = kept;
      } else {
        text = (magnitude + 0.5 * Math.pow(10, -digits)).toFixed(digits);
      }
    } else {
      text = magnitude.toFixed(digits);
    }
    return (negative && /[1-9]/.test(text) ? '-' : negative ? '-' : '') + text;
  }

  // C's llround: halves away from zero (Math.round sends -2.5 to -2).
  function llround(x) {
    return x < 0 ? -Math.round(-x) : Math.round(x);
  }

  const kUnits = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];

  // HumanBytes: "0 B", "512 B", "1.5 KiB", "126.0 MiB". `bytes` is a count
  // (rounded, at least 0, as the tool's Bytes(double) does).
  function humanBytes(bytes) {
    const n = Math.max(llround(Number(bytes)), 0);
    if (n < 1024) return n + ' B';
    let value = n / 1024;
    let unit = 0;
    // Switch units before rounding would print "1024.0".
    while (value >= 1023.95 && unit + 1 < kUnits.length) {
      value /= 1024;
      ++unit;
    }
    return toFixedEven(value, 1) + ' ' + kUnits[unit];
  }

  // SignedBytes: "+1.5 MiB", "-300 B", "0 B".
  function signedBytes(bytes) {
    const n = llround(Number(bytes));
    if (n === 0) return '0 B';
    return (n > 0 ? '+' : '-') + humanBytes(Math.abs(n));
  }

  // Bytes(int64_t): "-1.0 MiB" below zero, no '+' above (a figure that
  // should not be negative is shown as it is, never clamped).
  function plainBytes(bytes) {
    const n = llround(Number(bytes));
    return n < 0 ? '-' + humanBytes(-n) : humanBytes(n);
  }

  // printf's "%g": six significant digits, trailing zeros dropped, an
  // exponent of at least two digits below 1e-4 and from 1e6.
  function formatG(x) {
    if (!isFinite(x)) return x > 0 ? 'inf' : x < 0 ? '-inf' : 'nan';
    if (x === 0) return '0';
    const exponentText = Number(x).toExponential(5); // "d.ddddde+X"
    const exponent = Number(exponentText.slice(exponentText.indexOf('e') + 1));
    const strip = (s) => (s.indexOf('.') >= 0 ? s.replace(/0+$/, '').replace(/\.$/, '') : s);
    if (exponent < -4 || exponent >= 6) {
      const mantissa = strip(exponentText.slice(0, exponentText.indexOf('e')));
      const sign = exponent < 0 ? '-' : '+';
      const digits = String(Math.abs(exponent)).padStart(2, '0');
      return mantissa + 'e' + sign + digits;
    }
    return strip(toFixedEven(x, Math.max(0, 5 - exponent)));
  }

  // Percent: "79.9%".
  function percent(share) {
    return toFixedEven(share * 100, 1) + '%';
  }

  // " ±1.2 MiB" for an estimate; "" when exact.
  function plusMinus(error, estimated) {
    return estimated ? ' \u00b1' + humanBytes(error) : '';
  }

  // VerdictDetail: the "per request / level" column. `series` is a Series
  // of the JSON; `unit` is "request" or "snapshot".
  function verdictDetail(series, unit) {
    const estimated = !!series.estimated;
    const errors = series.live_bytes_error || [];
    const lastError = errors.length ? errors[errors.length - 1] : 0;
    switch (series.verdict) {
      case 'linear':
        return signedBytes(series.bytes_per_request) + '/' + unit +
            plusMinus(series.bytes_per_request_error, estimated) + ' (fit ' +
            toFixedEven(series.fit, 2) + ')';
      case 'plateau': {
        let band = '';
        if (series.band_high > series.band_low) {
          band = ' (' + humanBytes(series.band_low) + '..' + humanBytes(series.band_high) + ')';
        }
        return 'at ' + humanBytes(series.level) + plusMinus(lastError, estimated) + band +
            ' from ' + unit + ' ' + formatG(series.flat_from_request);
      }
      case 'warm-up':
        return 'one step to ' + humanBytes(series.level) + plusMinus(lastError, estimated) +
            ' at ' + unit + ' ' + formatG(series.flat_from_request);
      case 'too-few':
        return series.request_counts + ' ' + unit + ' counts; a verdict needs 4';
      default:  // flat, noise
        return signedBytes(series.growth) + ' overall' + plusMinus(lastError, estimated);
    }
  }

  // ---------------------------------------------------------------------
  // Scales and ticks.

  // A linear map from [d0, d1] to [r0, r1], with its inverse.
  function linearScale(d0, d1, r0, r1) {
    const span = d1 - d0 || 1;
    const scale = (v) => r0 + ((v - d0) / span) * (r1 - r0);
    scale.invert = (p) => d0 + ((p - r0) / ((r1 - r0) || 1)) * span;
    scale.domain = [d0, d1];
    scale.range = [r0, r1];
    return scale;
  }

  // About `count` ticks over [min, max] at 1, 2 or 5 x 10^k; `integer`
  // keeps steps of at least 1 (request counts).
  function niceTicks(min, max, count, integer) {
    if (!(max > min)) return [min];
    const raw = (max - min) / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = power;
    for (const m of [1, 2, 5, 10]) {
      step = m * power;
      if (step >= raw) break;
    }
    if (integer) step = Math.max(1, Math.round(step));
    const ticks = [];
    const first = Math.ceil(min / step - 1e-9) * step;
    for (let v = first; v <= max + step * 1e-9; v += step) {
      ticks.push(Number(v.toPrecision(12)));
    }
    return ticks;
  }

  // Byte ticks from 0: a step that is a power of two, so every label is a
  // round figure of its unit ("16.0 MiB", "512.0 KiB"); `top` is the axis'
  // end (the last tick, at or above max).
  function byteTicks(max, count) {
    if (!(max > 0)) return {ticks: [0], step: 1, top: 1};
    const raw = max / Math.max(1, count);
    const step = Math.pow(2, Math.ceil(Math.log2(raw)));
    const top = Math.ceil(max / step - 1e-9) * step;
    const ticks = [];
    for (let v = 0; v <= top; v += step) ticks.push(v);
    return {ticks: ticks, step: step, top: top};
  }

  // ---------------------------------------------------------------------
  // Series: top N owners stacked, the rest one "other" band.

  function peak(values) {
    let m = -Infinity;
    for (const v of values) if (v > m) m = v;
    return values.length ? m : 0;
  }

  // Cumulative bands: band i spans lo..hi at each x, lo = the sum of the
  // bands below it. Values below zero count as zero (live bytes are never
  // negative; a band never pokes through the one below).
  function stackBands(valueArrays) {
    const n = valueArrays.length ? valueArrays[0].length : 0;
    const base = new Array(n).fill(0);
    return valueArrays.map((values) => {
      const lo = base.slice();
      for (let i = 0; i < n; ++i) base[i] += Math.max(0, values[i] || 0);
      return {lo: lo, hi: base.slice()};
    });
  }

  // The owners of one domain: the `topN` with the largest peak, the rest
  // summed into one "other" band (not made for a single owner: it is drawn
  // as itself). Bands come in stack order, bottom first: owners that stop
  // growing (plateau, warm-up, flat, noise) below those still growing
  // (linear), so a bounded cache reads as a flat top on the baseline and a
  // leak as the climb above it; largest first within each; "other" on top.
  // Each band keeps its `rank` by peak (0: the largest), for its colour and
  // the legend's order. Returns {bands: [{row, values, other, count, rank}],
  // stacked: [{lo, hi}]}.
  function topOwners(rows, topN) {
    const ranked = rows.map((row, index) => ({row: row, index: index, peak: peak(row.live_bytes)}));
    ranked.sort((a, b) => b.peak - a.peak || a.index - b.index);
    let shown = ranked;
    let rest = [];
    if (ranked.length > topN + 1) {
      shown = ranked.slice(0, topN);
      rest = ranked.slice(topN);
    }
    const bands = shown.map((r, rank) => ({row: r.row, values: r.row.live_bytes, other: false, count: 1, rank: rank}));
    const growing = (b) => (b.row.verdict === 'linear' ? 1 : 0);
    bands.sort((a, b) => growing(a) - growing(b) || a.rank - b.rank);
    if (rest.length) {
      const n = rest[0].row.live_bytes.length;
      const sum = new Array(n).fill(0);
      for (const r of rest) {
        for (let i = 0; i < n; ++i) sum[i] += r.row.live_bytes[i] || 0;
      }
      bands.push({row: null, values: sum, other: true, count: rest.length, rank: shown.length});
    }
    return {bands: bands, stacked: stackBands(bands.map((b) => b.values))};
  }

  // The index in sorted `xs` nearest to x (the first of equal ones).
  function nearestIndex(xs, x) {
    if (!xs.length) return -1;
    let lo = 0;
    let hi = xs.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && Math.abs(xs[lo - 1] - x) <= Math.abs(xs[lo] - x)) {
      lo -= 1;
      while (lo > 0 && xs[lo - 1] === xs[lo]) --lo;
    }
    return lo;
  }

  // The requests snapshot i stands for: those that ended after the
  // previous snapshot's x and by its own (x counts ended requests), and
  // those still open whose last sight is this snapshot.
  function requestsAt(tags, xs, i) {
    if (!tags || i < 0 || i >= xs.length) return [];
    const from = i > 0 ? xs[i - 1] : -Infinity;
    const to = xs[i];
    return tags.filter((t) => (t.end_ordinal === null || t.end_ordinal === undefined)
      ? t.snapshot === i
      : t.end_ordinal > from && t.end_ordinal <= to);
  }

  // A shorter name for labels drawn in a chart: the last two parts of a
  // C++ qualified name, and its "(file:line)"; the table keeps the whole.
  function shortName(display) {
    const m = /^(.*?)( \([^()]*\))?$/.exec(display);
    let name = m[1];
    const where = m[2] || '';
    // Drop template and parameter lists before splitting on "::".
    let plain = '';
    let depth = 0;
    for (const c of name) {
      if (c === '<' || c === '(') ++depth;
      if (depth === 0) plain += c;
      if ((c === '>' || c === ')') && depth > 0) --depth;
    }
    const parts = plain.split('::').filter((p) => p.length);
    if (parts.length > 2) name = parts.slice(-2).join('::');
    return name + where;
  }

  // ---------------------------------------------------------------------
  // The icicle.

  // A node's bytes in a measure: "allocated", or "resident" (+ swapped, as
  // RssAnon+VmSwap counts). `measure` the data's own: its "bytes".
  function nodeBytes(node, measure, dataMeasure) {
    if (measure === dataMeasure) return node.bytes;
    if (measure === 'allocated') return node.allocated_bytes;
    return (node.resident_bytes || 0) + (node.swapped_bytes || 0);
  }

  // Children lists and depths of "stacks".nodes (parents before children).
  function buildTree(nodes) {
    const children = nodes.map(() => []);
    const depth = new Array(nodes.length).fill(0);
    const index = new Map();
    nodes.forEach((node, i) => index.set(node.id, i));
    nodes.forEach((node, i) => {
      if (node.parent >= 0 && index.has(node.parent)) {
        const p = index.get(node.parent);
        children[p].push(i);
        depth[i] = depth[p] + 1;
      }
    });
    const root = nodes.findIndex((node) => node.parent < 0);
    return {nodes: nodes, children: children, depth: depth, root: root, index: index};
  }

  // The ancestors of node i, root first (i excluded).
  function ancestors(tree, i) {
    const out = [];
    let p = tree.nodes[i].parent;
    while (p >= 0 && tree.index.has(p)) {
      const j = tree.index.get(p);
      out.unshift(j);
      p = tree.nodes[j].parent;
    }
    return out;
  }

  // Rectangles of the subtree of `focus`, `width` wide: the focus spans it
  // all at row `top`, each child a share of its parent's width equal to its
  // share of the parent's bytes, heaviest first from the left; what a node
  // holds itself is the gap on its right. Nodes narrower than `minWidth`
  // (and all below them) are not drawn. Returns [{i, x, w, row}].
  function icicleLayout(tree, focus, width, valueOf, minWidth, top) {
    const out = [];
    const total = valueOf(tree.nodes[focus]);
    if (!(total > 0)) return out;
    const stack = [{i: focus, x: 0, w: width, row: top || 0}];
    while (stack.length) {
      const item = stack.pop();
      out.push(item);
      const parentBytes = valueOf(tree.nodes[item.i]);
      const kids = tree.children[item.i]
        .map((c) => ({c: c, v: valueOf(tree.nodes[c])}))
        .filter((k) => k.v > 0)
        .sort((a, b) => b.v - a.v || (tree.nodes[a.c].name < tree.nodes[b.c].name ? -1 : 1));
      let x = item.x;
      const placed = [];
      for (const k of kids) {
        const w = item.w * (k.v / parentBytes);
        if (w >= minWidth) placed.push({i: k.c, x: x, w: w, row: item.row + 1});
        x += w;
      }
      for (let j = placed.length - 1; j >= 0; --j) stack.push(placed[j]);
    }
    return out;
  }

  // The nodes whose name contains `query` (case-insensitive), and their
  // bytes counted once: a match under a match adds nothing.
  function searchTree(tree, query, valueOf) {
    const matches = new Set();
    if (!query) return {matches: matches, bytes: 0};
    const q = query.toLowerCase();
    let bytes = 0;
    const visit = (i, covered) => {
      const hit = tree.nodes[i].name.toLowerCase().indexOf(q) >= 0;
      if (hit) {
        matches.add(i);
        if (!covered) bytes += Math.max(0, valueOf(tree.nodes[i]));
      }
      for (const c of tree.children[i]) visit(c, covered || hit);
    };
    // Iterative over the root's children would be deeper than needed: the
    // tree's depth is a stack's (at most 256 frames).
    if (tree.root >= 0) visit(tree.root, false);
    return {matches: matches, bytes: bytes};
  }

  // ---------------------------------------------------------------------
  // Tables.

  // Rows sorted by a column: `column.value(row)` gives a number or a
  // string; `descending` for largest first. Stable: rows that compare equal
  // keep their order (the tool's).
  function sortRows(rows, column, descending) {
    const keyed = rows.map((row, index) => ({row: row, index: index, key: column.value(row)}));
    keyed.sort((a, b) => {
      let c;
      if (typeof a.key === 'number' && typeof b.key === 'number') {
        c = a.key - b.key;
      } else {
        const x = String(a.key).toLowerCase();
        const y = String(b.key).toLowerCase();
        c = x < y ? -1 : x > y ? 1 : 0;
      }
      if (descending) c = -c;
      return c || a.index - b.index;
    });
    return keyed.map((k) => k.row);
  }

  // A diff row's bytes in a measure (the JSON's "retained_bytes" are in
  // the data's own).
  function rowBytes(row, measure, dataMeasure, prefix) {
    const p = prefix || 'retained';
    if (measure === dataMeasure) return row[p + '_bytes'];
    if (measure === 'allocated') return row[p + '_allocated_bytes'];
    return (row[p + '_resident_bytes'] || 0) + (row[p + '_swapped_bytes'] || 0);
  }

  const api = {
    toFixedEven, llround, humanBytes, signedBytes, plainBytes, formatG, percent, verdictDetail,
    linearScale, niceTicks, byteTicks, stackBands, topOwners, nearestIndex, requestsAt, shortName,
    nodeBytes, buildTree, ancestors, icicleLayout, searchTree, sortRows, rowBytes,
  };

  if (typeof module === 'object' && module && module.exports) {
    module.exports = api;
  }
  if (typeof document === 'undefined' || typeof window === 'undefined') return;

  // =====================================================================
  // The page (DOM).

  const SVG = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948',
    '#b07aa1', '#ff9da7', '#9c755f', '#86bcb6', '#d37295', '#a0cbe8'];
  const OTHER_COLOR = '#c7c7c7';
  const LINES = [
    {key: 'rss', name: 'VmRSS', color: '#222222', dash: ''},
    {key: 'anon_swap', name: 'RssAnon+VmSwap', color: '#7b3294', dash: '6 3'},
    {key: 'tracked', name: 'tracked (host)', color: '#1a9641', dash: '2 3'},
    {key: 'allocator_free', name: 'allocator-held free', color: '#d7191c', dash: '8 3 2 3'},
  ];

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === 'text') node.textContent = attrs[k];
      else if (k === 'class') node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    }
    for (const c of children || []) if (c) node.appendChild(c);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const k in attrs || {}) {
      if (k === 'text') node.textContent = attrs[k];
      else node.setAttribute(k, attrs[k]);
    }
    return node;
  }

  function escapeText(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'})[c]);
  }

  function badge(verdict) {
    return el('span', {class: 'badge verdict-' + verdict, text: verdict});
  }

  function panel(title, id) {
    const body = el('div', {class: 'panel-body'});
    const head = el('h2', {text: title});
    const section = el('section', {class: 'panel', id: id}, [head, body]);
    return {section: section, body: body, head: head};
  }

  function describeSnapshot(ref) {
    let text = '#' + ref.sequence;
    if (ref.label) text += ' "' + ref.label + '"';
    const when = new Date(ref.time_unix_ns / 1e6);
    const pad = (n) => String(n).padStart(2, '0');
    const stamp = when.getFullYear() + '-' + pad(when.getMonth() + 1) + '-' + pad(when.getDate()) +
        ' ' + pad(when.getHours()) + ':' + pad(when.getMinutes()) + ':' + pad(when.getSeconds());
    return text + ' (' + ref.trigger + ', ' + stamp + ')';
  }

  function measureLine(data) {
    if (data.measure_fallback) return data.measure_fallback;
    if (!data.residency_measured) return 'allocated bytes (the snapshots have no residency)';
    if (data.measure === 'resident') {
      return 'resident bytes (in RAM + swapped, as RssAnon+VmSwap counts); allocated beside';
    }
    return 'allocated bytes (asked for, pages never touched included); resident beside';
  }

  // The header: what the tool prints above its table, as a definition list.
  function header(data, title, lines) {
    const dl = el('dl', {class: 'facts'});
    for (const [k, v] of lines) {
      if (v === null || v === undefined || v === '') continue;
      dl.appendChild(el('dt', {text: k}));
      dl.appendChild(el('dd', {text: v}));
    }
    const box = el('header', {class: 'report-header'}, [el('h1', {text: title}), dl]);
    const warnings = data.warnings || [];
    if (warnings.length) {
      const ul = el('ul', {class: 'warnings'});
      for (const w of warnings) ul.appendChild(el('li', {text: w}));
      box.appendChild(ul);
    }
    return box;
  }

  function exeName(path) {
    return String(path || '').split('/').pop();
  }

  // A tooltip that follows the pointer inside `host`.
  function tooltip(host) {
    const tip = el('div', {class: 'tooltip', role: 'status'});
    tip.hidden = true;
    host.appendChild(tip);
    return {
      show(content, px, py) {
        tip.replaceChildren(content);
        tip.hidden = false;
        const hostWidth = host.clientWidth;
        const w = tip.offsetWidth;
        let left = px + 14;
        if (left + w > hostWidth) left = Math.max(0, px - w - 14);
        tip.style.left = left + 'px';
        // Below the pointer, or above it where the box would end under the host.
        let top = py + 12;
        if (top + tip.offsetHeight > host.clientHeight) top = Math.max(0, py - tip.offsetHeight - 12);
        tip.style.top = top + 'px';
      },
      hide() { tip.hidden = true; },
      node: tip,
    };
  }

  // ------------------------------------------------------------------
  // Trend: a chart of one domain's owners, stacked or as lines.

  function seriesChart(container, opts) {
    // opts: {xs, unit, axisLabel, rows, lines: [{name, color, dash, series}], topN,
    //        mode: 'stacked'|'lines', tags, snapshots, id}
    const wrap = el('div', {class: 'chart-wrap'});
    const chartBox = el('div', {class: 'chart'});
    const legend = el('div', {class: 'legend'});
    wrap.appendChild(chartBox);
    wrap.appendChild(legend);
    container.appendChild(wrap);
    const tip = tooltip(chartBox);

    function currentWidth() {
      return Math.max(360, chartBox.clientWidth || 720);
    }

    function draw(knownWidth) {
      const model = topOwners(opts.rows, opts.topN);
      const colors = model.bands.map((b) => (b.other ? OTHER_COLOR : PALETTE[b.rank % PALETTE.length]));
      const width = knownWidth || currentWidth();
      const height = opts.height || 380;
      const m = {left: 78, right: 16, top: 14, bottom: 44};
      const xs = opts.xs;
      const x0 = xs.length ? xs[0] : 0;
      const x1 = xs.length ? xs[xs.length - 1] : 1;
      const stacked = opts.mode === 'stacked';
      let ymax = 0;
      model.bands.forEach((b, i) => {
        ymax = Math.max(ymax, stacked ? peak(model.stacked[i].hi) : peak(b.values));
      });
      for (const line of opts.lines) if (line.visible) ymax = Math.max(ymax, peak(line.series.live_bytes));
      const yt = byteTicks(ymax, 5);
      const sx = linearScale(x0, x1 > x0 ? x1 : x0 + 1, m.left, width - m.right);
      const sy = linearScale(0, yt.top, height - m.bottom, m.top);
      const root = svg('svg', {class: 'series', width: width, height: height,
        viewBox: '0 0 ' + width + ' ' + height, role: 'img',
        'aria-label': opts.title || 'retention per request'});
      // Grid and axes.
      const grid = svg('g', {class: 'grid'});
      for (const t of yt.ticks) {
        const y = sy(t).toFixed(1);
        grid.appendChild(svg('line', {x1: m.left, x2: width - m.right, y1: y, y2: y}));
        grid.appendChild(svg('text', {x: m.left - 6, y: y, class: 'tick y', text: humanBytes(t)}));
      }
      for (const t of niceTicks(x0, x1, Math.max(2, Math.floor((width - m.left) / 80)), true)) {
        const x = sx(t).toFixed(1);
        grid.appendChild(svg('line', {x1: x, x2: x, y1: m.top, y2: height - m.bottom, class: 'v'}));
        grid.appendChild(svg('text', {x: x, y: height - m.bottom + 16, class: 'tick x', text: formatG(t)}));
      }
      grid.appendChild(svg('text', {x: (m.left + width - m.right) / 2, y: height - 6,
        class: 'axis-label', text: opts.axisLabel}));
      grid.appendChild(svg('text', {x: m.left + 6, y: m.top + 12, class: 'axis-label y', text: opts.measureLabel}));
      root.appendChild(grid);
      // Bands or owner lines.
      const bandsGroup = svg('g', {class: 'bands'});
      model.bands.forEach((b, i) => {
        const name = b.other ? 'other (' + b.count + ' owners)' : b.row.owner.display;
        let d = '';
        if (stacked) {
          const s = model.stacked[i];
          for (let k = 0; k < xs.length; ++k) d += (k ? 'L' : 'M') + sx(xs[k]).toFixed(1) + ',' + sy(s.hi[k]).toFixed(1);
          for (let k = xs.length - 1; k >= 0; --k) d += 'L' + sx(xs[k]).toFixed(1) + ',' + sy(s.lo[k]).toFixed(1);
          d += 'Z';
        } else {
          for (let k = 0; k < xs.length; ++k) d += (k ? 'L' : 'M') + sx(xs[k]).toFixed(1) + ',' + sy(b.values[k]).toFixed(1);
        }
        const path = svg('path', {d: d, class: (stacked ? 'band' : 'owner-line') + (b.other ? ' other' : ''),
          fill: stacked ? colors[i] : 'none', stroke: colors[i],
          'data-owner': b.other ? '(other)' : b.row.owner.key,
          'data-verdict': b.other ? '' : b.row.verdict, 'data-band': i});
        path.appendChild(svg('title', {text: name}));
        bandsGroup.appendChild(path);
      });
      root.appendChild(bandsGroup);
      // Total lines.
      const linesGroup = svg('g', {class: 'lines'});
      for (const line of opts.lines) {
        if (!line.visible) continue;
        let d = '';
        line.series.live_bytes.forEach((v, k) => {
          d += (k ? 'L' : 'M') + sx(xs[k]).toFixed(1) + ',' + sy(v).toFixed(1);
        });
        const path = svg('path', {d: d, class: 'total-line', stroke: line.color, 'data-line': line.key,
          'stroke-dasharray': line.dash});
        path.appendChild(svg('title', {text: line.name}));
        linesGroup.appendChild(path);
      }
      root.appendChild(linesGroup);
      // Labels at the right end of each band tall enough to hold one (drawn
      // once the chart is in the page: their pills are sized to their text).
      const labels = svg('g', {class: 'band-labels'});
      root.appendChild(labels);
      // Hover: a crosshair, the points, and the requests they stand for.
      const cross = svg('line', {class: 'crosshair', y1: m.top, y2: height - m.bottom, visibility: 'hidden'});
      root.appendChild(cross);
      const dots = svg('g', {class: 'dots'});
      root.appendChild(dots);
      const overlay = svg('rect', {x: m.left, y: m.top, width: Math.max(0, width - m.left - m.right),
        height: Math.max(0, height - m.top - m.bottom), class: 'overlay'});
      root.appendChild(overlay);
      const onMove = (event) => {
        const rect = root.getBoundingClientRect();
        const px = event.clientX - rect.left;
        const py = event.clientY - rect.top;
        const i = nearestIndex(xs, sx.invert(px));
        if (i < 0) return;
        const cx = sx(xs[i]);
        cross.setAttribute('x1', cx);
        cross.setAttribute('x2', cx);
        cross.setAttribute('visibility', 'visible');
        dots.replaceChildren();
        model.bands.forEach((b, k) => {
          const v = stacked ? model.stacked[k].hi[i] : b.values[i];
          dots.appendChild(svg('circle', {cx: cx, cy: sy(v), r: 3, fill: colors[k]}));
        });
        tip.show(pointDetails(opts, model, colors, i), px, py);
      };
      overlay.addEventListener('mousemove', onMove);
      overlay.addEventListener('mouseleave', () => {
        cross.setAttribute('visibility', 'hidden');
        dots.replaceChildren();
        tip.hide();
      });
      chartBox.replaceChildren(root, tip.node);
      tip.hide();
      drawLabels(labels, model, sx, sy, width - m.right - 6);
      drawLegend(model, colors);
    }

    // Name, verdict pill and figures of each band at its right end; a band
    // too thin, or too close to one already labelled, gets none (its
    // legend entry says the same).
    function drawLabels(group, model, sx, sy, right) {
      const xs = opts.xs;
      const last = xs.length - 1;
      const stacked = opts.mode === 'stacked';
      const used = [];
      model.bands.forEach((b, i) => {
        if (b.other || last < 0) return;
        const yTop = sy(stacked ? model.stacked[i].hi[last] : b.values[last]);
        const yBottom = stacked ? sy(model.stacked[i].lo[last]) : yTop;
        if (stacked && yBottom - yTop < 34) return;
        const y = stacked ? (yTop + yBottom) / 2 - 8 : yTop - 24;
        if (y < 10 || used.some((u) => Math.abs(u - y) < 36)) return;
        used.push(y);
        const g = svg('g', {class: 'band-label', 'data-owner': b.row.owner.key});
        group.appendChild(g);
        g.appendChild(svg('text', {x: right, y: y, class: 'label-name', text: shortName(b.row.owner.display)}));
        const detail = svg('text', {x: right, y: y + 18, class: 'label-detail', text: verdictDetail(b.row, opts.unit)});
        g.appendChild(detail);
        const pill = svg('text', {class: 'label-pill', y: y + 18, text: b.row.verdict});
        g.appendChild(pill);
        const pillWidth = pill.getComputedTextLength() + 14;
        const pillRight = right - detail.getComputedTextLength() - 6;
        pill.setAttribute('x', pillRight - pillWidth / 2);
        g.insertBefore(svg('rect', {class: 'pill verdict-' + b.row.verdict, x: pillRight - pillWidth, y: y + 5.5,
          width: pillWidth, height: 17, rx: 8.5}), pill);
      });
    }

    function drawLegend(model, colors) {
      const box = document.createDocumentFragment();
      if (opts.lines.length) {
        box.appendChild(el('div', {class: 'legend-section', text: opts.lines.length > 1 ? 'totals' : 'total'}));
        const lines = el('ul', {class: 'legend-list'});
        for (const line of opts.lines) {
          const item = el('li', {class: 'legend-item line', 'data-line': line.key});
          const toggle = el('label', {class: 'line-toggle', title: 'show or hide this line'});
          const check = el('input', {type: 'checkbox'});
          check.checked = line.visible;
          check.addEventListener('change', () => { line.visible = check.checked; draw(); });
          toggle.appendChild(check);
          toggle.appendChild(lineSwatch(line));
          item.appendChild(toggle);
          const body = el('div', {class: 'legend-body'});
          body.appendChild(el('div', {class: 'owner-name', title: line.name, text: line.name}));
          if (line.series.verdict) {
            const detail = el('div', {class: 'detail'}, [badge(line.series.verdict)]);
            detail.appendChild(el('span', {class: 'verdict-detail', text: verdictDetail(line.series, opts.unit)}));
            body.appendChild(detail);
          }
          item.appendChild(body);
          lines.appendChild(item);
        }
        box.appendChild(lines);
      }
      const owners = model.bands.reduce((n, b) => n + b.count, 0);
      box.appendChild(el('div', {class: 'legend-section', text: model.bands.some((b) => b.other)
        ? 'owners: the top ' + (model.bands.length - 1) + ' of ' + owners
        : owners === 1 ? 'owner' : 'owners: all ' + owners}));
      const list = el('ul', {class: 'legend-list'});
      const byRank = model.bands.map((b, i) => i).sort((a, b) => model.bands[a].rank - model.bands[b].rank);
      byRank.forEach((i) => {
        const b = model.bands[i];
        const item = el('li', {class: 'legend-item' + (b.other ? ' other' : ''),
          'data-owner': b.other ? '(other)' : b.row.owner.key});
        item.appendChild(el('span', {class: 'swatch', style: 'background:' + colors[i]}));
        const body = el('div', {class: 'legend-body'});
        if (b.other) {
          body.appendChild(el('div', {class: 'owner-name', text: 'other (' + b.count + ' owners)'}));
          body.appendChild(el('div', {class: 'detail',
            text: humanBytes(b.values[b.values.length - 1] || 0) + ' at the last snapshot'}));
        } else {
          body.appendChild(el('div', {class: 'owner-name', title: b.row.owner.display,
            text: shortName(b.row.owner.display)}));
          const detail = el('div', {class: 'detail'}, [badge(b.row.verdict)]);
          detail.appendChild(el('span', {class: 'verdict-detail', text: verdictDetail(b.row, opts.unit)}));
          body.appendChild(detail);
        }
        item.appendChild(body);
        item.addEventListener('mouseenter', () => highlight(i));
        item.addEventListener('mouseleave', () => highlight(-1));
        list.appendChild(item);
      });
      box.appendChild(list);
      legend.replaceChildren(box);
    }

    function lineSwatch(line) {
      const s = svg('svg', {width: 22, height: 10});
      s.appendChild(svg('line', {x1: 0, x2: 22, y1: 5, y2: 5, stroke: line.color, 'stroke-width': 2,
        'stroke-dasharray': line.dash}));
      return s;
    }

    function highlight(i) {
      const root = chartBox.querySelector('svg.series');
      if (!root) return;
      root.classList.toggle('focus', i >= 0);
      root.querySelectorAll('[data-band]').forEach((p) => {
        p.classList.toggle('hl', Number(p.getAttribute('data-band')) === i);
      });
    }

    return {draw: draw, width: currentWidth, opts: opts};
  }

  // The tooltip of snapshot i: its x, the requests it stands for, the
  // lines and the largest bands there (the rest summed).
  function pointDetails(opts, model, colors, i) {
    const box = el('div');
    const ref = opts.snapshots && opts.snapshots[i];
    box.appendChild(el('div', {class: 'tip-title', text: opts.unit + ' ' + formatG(opts.xs[i])}));
    if (ref) box.appendChild(el('div', {class: 'tip-sub', text: 'snapshot ' + describeSnapshot(ref)}));
    if (opts.tags) {
      const reqs = requestsAt(opts.tags, opts.xs, i);
      const title = reqs.length ? (reqs.length === 1 ? 'the request it stands for:' :
        'the ' + reqs.length + ' requests it stands for:') : 'no request ended since the previous snapshot';
      box.appendChild(el('div', {class: 'tip-head', text: title}));
      const list = el('ul', {class: 'tip-requests'});
      reqs.slice(0, 5).forEach((t) => {
        const live = t.live_bytes === null || t.live_bytes === undefined ? 'unknown' : humanBytes(t.live_bytes);
        list.appendChild(el('li', {'data-tag': t.tag_id,
          text: 'tag ' + t.tag_id + ' \u00b7 ' + (t.request_id || '(no id)') + ' \u00b7 ' + t.method + ' ' + t.path +
            (t.aborted ? ' (aborted)' : '') + (t.end_ordinal === null ? ' (open)' : '') +
            ': allocated ' + humanBytes(t.allocated_bytes) + ' while open, ' + live + ' still live'}));
      });
      if (reqs.length > 5) list.appendChild(el('li', {class: 'more', text: '... and ' + (reqs.length - 5) + ' more'}));
      box.appendChild(list);
    }
    const table = el('table', {class: 'tip-values'});
    const add = (color, name, value, line) => {
      const sw = el('span', {class: 'swatch' + (line ? ' line' : ''),
        style: line ? 'border-color:' + color : 'background:' + color});
      table.appendChild(el('tr', {}, [el('td', {}, [sw]), el('td', {class: 'num', text: humanBytes(value)}),
        el('td', {class: 'name', text: name})]));
    };
    for (const line of opts.lines) {
      if (line.visible) add(line.color, line.name, line.series.live_bytes[i], true);
    }
    const order = model.bands.map((b, k) => k).sort((a, b) => model.bands[b].values[i] - model.bands[a].values[i]);
    const shown = order.slice(0, 5);
    for (const k of shown) {
      const b = model.bands[k];
      add(colors[k], b.other ? 'other (' + b.count + ' owners)' : shortName(b.row.owner.display), b.values[i]);
    }
    if (order.length > shown.length) {
      const rest = order.slice(shown.length);
      const bytes = rest.reduce((sum, k) => sum + model.bands[k].values[i], 0);
      const owners = rest.reduce((sum, k) => sum + model.bands[k].count, 0);
      add('transparent', owners + ' more owners', bytes);
    }
    box.appendChild(table);
    return box;
  }

  function renderTrend(app, data) {
    const unit = data.requests_from_tags ? 'request' : 'snapshot';
    const first = data.snapshots[0];
    const last = data.snapshots[data.snapshots.length - 1];
    const xs = data.requests;
    document.title = 'retain: ' + exeName(first.exe) + ' (pid ' + first.pid + '), trend of ' +
        data.snapshots.length + ' snapshots';
    app.appendChild(header(data, 'retain-diff --trend: ' + first.exe + ' (pid ' + first.pid + ')', [
      ['snapshots', data.snapshots.length + ': ' + describeSnapshot(first) + ' to ' + describeSnapshot(last)],
      ['measure', measureLine(data)],
      ['x axis', (data.requests_from_tags ? 'requests served (from request tags)' : 'snapshot number (no request tags)') +
        ': ' + formatG(xs[0]) + ' .. ' + formatG(xs[xs.length - 1])],
      ['owners', data.owner_count + ' by ' + data.group_by],
      ['note', data.estimated ? 'sampled snapshots: ~ marks estimates, \u00b1 one standard error' : ''],
      ['requests', data.request_tags_truncated ? 'the newest 10,000 requests are listed' : ''],
    ]));
    const axisLabel = data.requests_from_tags ? 'requests served' : 'snapshot number';
    const hostRows = data.rows.filter((r) => r.owner.domain === 'host');
    const state = {topN: 10, mode: 'stacked'};
    const by = data.group_by === 'category' ? 'category' : 'owner';
    const host = panel('Host memory per ' + unit + ', by ' + by, 'series-host');
    const controls = el('div', {class: 'controls'});
    const modeButtons = ['stacked', 'lines'].map((mode) => {
      const b = el('button', {type: 'button', 'data-mode': mode, text: mode === 'stacked' ? 'stacked' : 'each alone'});
      b.addEventListener('click', () => { state.mode = mode; sync(); });
      return b;
    });
    controls.appendChild(el('span', {class: 'control-label', text: 'owners:'}));
    modeButtons.forEach((b) => controls.appendChild(b));
    const topInput = el('input', {type: 'number', min: '1', max: '50', value: String(state.topN), id: 'top-n'});
    topInput.addEventListener('change', () => {
      const v = Math.max(1, Math.min(50, Math.floor(Number(topInput.value)) || 10));
      topInput.value = String(v);
      state.topN = v;
      sync();
    });
    controls.appendChild(el('label', {class: 'control-label', for: 'top-n', text: 'top'}));
    controls.appendChild(topInput);
    controls.appendChild(el('span', {class: 'control-note',
      text: hostRows.length + ' owners; the rest drawn as one "other" band'}));
    host.body.appendChild(controls);
    const lines = LINES.filter((l) => data[l.key]).map((l) => Object.assign({series: data[l.key], visible: true}, l));
    // Every chart's options share the state's topN and mode (sync copies them).
    const charts = [];
    const tags = data.request_tags || null;
    const measureLabel = data.measure === 'resident' ? 'resident + swapped bytes' : 'allocated bytes';
    charts.push(seriesChart(host.body, {xs: xs, unit: unit, axisLabel: axisLabel, measureLabel: measureLabel,
      rows: hostRows, lines: lines,
      tags: tags, snapshots: data.snapshots, title: 'host memory per ' + unit}));
    app.appendChild(host.section);
    // One panel per device: its owners and its total, never added to RSS.
    (data.devices || []).forEach((device, k) => {
      const rows = data.rows.filter((r) => r.owner.domain === device.domain);
      const name = device.domain + (device.name ? ' (' + device.name + ')' : '');
      const p = panel(name + ': device memory per ' + unit + ' (not in RSS)', 'series-device-' + k);
      charts.push(seriesChart(p.body, {xs: xs, unit: unit, axisLabel: axisLabel, measureLabel: 'device bytes', rows: rows,
        lines: [{key: 'device', name: 'tracked ' + device.domain, color: '#222222', dash: '', series: device.series,
          visible: true}], tags: tags, snapshots: data.snapshots, height: 260, title: name}));
      app.appendChild(p.section);
    });
    function redraw() {
      // Every chart's width first: one layout, not one per chart.
      const widths = charts.map((c) => c.width());
      charts.forEach((c, k) => c.draw(widths[k]));
    }
    function sync() {
      modeButtons.forEach((b) => b.setAttribute('aria-pressed', String(b.getAttribute('data-mode') === state.mode)));
      for (const c of charts) Object.assign(c.opts, state);
      redraw();
    }
    // The charts before the table: their layout is then that of a short page.
    sync();
    app.appendChild(trendTable(data, unit));
    let pending = 0;
    window.addEventListener('resize', () => {
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(redraw);
    });
  }

  // ------------------------------------------------------------------
  // Tables.

  // A sortable table: columns {name, value(row), cell(row) -> text|Node,
  // num}; rows expand to `expand(row)` (a Node) on click.
  function sortableTable(columns, rows, expand, opts) {
    const table = el('table', {class: 'owners'});
    const thead = el('thead');
    const headRow = el('tr');
    const state = {column: -1, descending: true};
    const body = el('tbody');
    columns.forEach((column, k) => {
      const button = el('button', {type: 'button', text: column.name, 'data-column': k});
      button.addEventListener('click', () => {
        if (state.column === k) state.descending = !state.descending;
        else { state.column = k; state.descending = !!column.num; }
        fill();
      });
      headRow.appendChild(el('th', {class: column.num ? 'num' : '', scope: 'col'}, [button]));
    });
    thead.appendChild(headRow);
    table.appendChild(thead);
    if (opts && opts.before) table.appendChild(opts.before);
    table.appendChild(body);
    if (opts && opts.after) table.appendChild(opts.after);
    function fill() {
      const sorted = state.column < 0 ? rows : sortRows(rows, columns[state.column], state.descending);
      headRow.querySelectorAll('th').forEach((th, k) => {
        th.setAttribute('aria-sort', k === state.column ? (state.descending ? 'descending' : 'ascending') : 'none');
      });
      const frag = document.createDocumentFragment();
      for (const row of sorted) {
        const tr = el('tr', {class: 'owner-row', tabindex: '0', 'aria-expanded': 'false'});
        tr.setAttribute('data-owner', row.owner.key);
        for (const column of columns) {
          const content = column.cell(row);
          const td = el('td', {class: (column.num ? 'num' : '') + (column.cls ? ' ' + column.cls : '')});
          if (typeof content === 'string') td.textContent = content; else td.appendChild(content);
          tr.appendChild(td);
        }
        let detail = null;
        const toggle = () => {
          if (detail) {
            detail.remove();
            detail = null;
            tr.setAttribute('aria-expanded', 'false');
          } else {
            detail = el('tr', {class: 'frames-row'}, [el('td', {colspan: String(columns.length)}, [expand(row)])]);
            tr.after(detail);
            tr.setAttribute('aria-expanded', 'true');
          }
        };
        tr.addEventListener('click', toggle);
        tr.addEventListener('keydown', (e) => {
          if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(); }
        });
        frag.appendChild(tr);
      }
      body.replaceChildren(frag);
    }
    fill();
    return table;
  }

  // An owner's whole stack, leaf first, the site marked.
  function framesList(owner) {
    const ol = el('ol', {class: 'frames'});
    const frames = owner.frames && owner.frames.length ? owner.frames : [owner.display];
    const site = owner.display;
    for (const f of frames) {
      ol.appendChild(el('li', {class: f === site ? 'site' : '', text: f}));
    }
    const box = el('div', {class: 'frames-box'}, [el('div', {class: 'frames-title',
      text: 'stack (leaf first), ' + frames.length + ' frames' + (owner.category ? '; category ' + owner.category +
        (owner.bounded ? ' (bounded)' : '') : '')}), ol]);
    return box;
  }

  // The owner column: its name, its category (unless the rows are
  // categories), and for a trend its device (a diff's device rows are under
  // their device's heading), as the tool prints them.
  function ownerCell(row, by, withDomain) {
    const span = el('span', {class: 'owner-name', text: row.owner.display});
    const wrap = el('span', {}, [el('span', {class: 'expander', 'aria-hidden': 'true', text: '\u25b8 '}), span]);
    if (row.owner.category && by !== 'category') {
      wrap.appendChild(el('span', {class: 'category', text: ' [' + row.owner.category + (row.owner.bounded ? ', bounded' : '') + ']'}));
    }
    if (withDomain && row.owner.domain && row.owner.domain !== 'host') {
      wrap.appendChild(el('span', {class: 'category', text: ' (' + row.owner.domain + ')'}));
    }
    return wrap;
  }

  function trendTable(data, unit) {
    const p = panel('Owners (' + data.owner_count + ', by ' + data.group_by + ')', 'owners');
    const approx = (row) => (row.estimated ? '~' : '');
    const lastOf = (a) => (a && a.length ? a[a.length - 1] : 0);
    const allocatedBeside = data.measure === 'resident';
    const columns = [
      {name: 'verdict', value: (r) => r.verdict, cell: (r) => badge(r.verdict)},
      {name: 'first', num: true, value: (r) => r.live_bytes[0], cell: (r) => approx(r) + humanBytes(r.live_bytes[0])},
      {name: 'last', num: true, value: (r) => lastOf(r.live_bytes), cell: (r) => approx(r) + humanBytes(lastOf(r.live_bytes))},
    ];
    if (allocatedBeside) {
      columns.push({name: 'allocated', num: true, value: (r) => lastOf(r.allocated_bytes),
        cell: (r) => (r.allocated_bytes ? approx(r) + humanBytes(lastOf(r.allocated_bytes)) : '')});
    }
    columns.push({name: 'per ' + unit + ' / level', num: true, cls: 'detail-cell',
      value: (r) => (r.verdict === 'linear' ? r.bytes_per_request : r.verdict === 'plateau' || r.verdict === 'warm-up' ? r.level : r.growth),
      cell: (r) => verdictDetail(r, unit)});
    columns.push({name: 'owner (' + data.group_by + ')', value: (r) => r.owner.display, cell: (r) => ownerCell(r, data.group_by, true)});
    // The total lines first, as the tool prints them (not sorted).
    const totals = el('tbody', {class: 'totals'});
    const lineRows = [[data.rss, 'VmRSS'], [data.anon_swap, 'RssAnon+VmSwap'], [data.tracked, 'tracked (host)']];
    if (data.allocator_free) lineRows.push([data.allocator_free, 'allocator-held free']);
    for (const device of data.devices || []) lineRows.push([device.series, 'tracked ' + device.domain + (device.name ? ' (' + device.name + ')' : '')]);
    for (const [series, name] of lineRows) {
      if (!series) continue;
      const tr = el('tr', {class: 'total-row'});
      tr.appendChild(el('td', {}, [badge(series.verdict)]));
      tr.appendChild(el('td', {class: 'num', text: humanBytes(series.live_bytes[0])}));
      tr.appendChild(el('td', {class: 'num', text: humanBytes(lastOf(series.live_bytes))}));
      if (allocatedBeside) {
        tr.appendChild(el('td', {class: 'num', text: series.allocated_bytes ? humanBytes(lastOf(series.allocated_bytes)) : ''}));
      }
      tr.appendChild(el('td', {class: 'num detail-cell', text: verdictDetail(series, unit)}));
      tr.appendChild(el('td', {text: name}));
      totals.appendChild(tr);
    }
    const table = sortableTable(columns, data.rows, (r) => framesList(r.owner), {before: totals});
    p.body.appendChild(el('p', {class: 'hint', text: 'Click a column to sort by it, an owner to see its whole stack.'}));
    p.body.appendChild(el('div', {class: 'table-wrap'}, [table]));
    return p.section;
  }

  // ------------------------------------------------------------------
  // Diff and live.

  function otherMeasure(m) { return m === 'resident' ? 'allocated' : 'resident'; }

  function kindText(kind, data) {
    let text = (kind.domain === 'host' ? '' : kind.domain + ' ') + kind.kind + ' ' + signedBytes(kind.measured_bytes);
    if (!data.residency_measured) return text;
    const other = data.measure === 'resident' ? kind.live_bytes : kind.resident_bytes + kind.swapped_bytes;
    text += ' (' + otherMeasure(data.measure) + ' ' + signedBytes(other);
    if (kind.swapped_bytes) text += ', swapped ' + signedBytes(kind.swapped_bytes);
    return text + ')';
  }

  // The "categories" line (--rules): the host's memory by category.
  function categoriesText(data) {
    if (!data.categories || !data.categories.length) return '';
    const live = data.before === null;
    const other = otherMeasure(data.measure);
    return data.categories.map((c) => {
      const net = c.retained_bytes - c.released_bytes;
      let text = c.category + ' ' + (live ? humanBytes(c.retained_bytes) : signedBytes(net));
      if (data.residency_measured) {
        const retained = rowBytes(c, other, data.measure);
        const bytes = live ? retained : retained - rowBytes(c, other, data.measure, 'released');
        text += ' (' + other + ' ' + (live ? humanBytes(bytes) : signedBytes(bytes)) + ')';
      }
      return text;
    }).join(', ');
  }

  function addsUpText(data) {
    const level = data.rss.after_level;
    return (data.before ? 'at after: ' : '') + 'tracked resident ' + plainBytes(level.tracked_anon) +
        ' + allocator-held free ' + plainBytes(level.allocator_free_held) + ' + untracked ' +
        plainBytes(level.untracked) + ' = RssAnon+VmSwap ' + plainBytes(level.anon_swap) +
        (level.allocator_free_trimmed > 0 ? ' (malloc counts ' + plainBytes(level.allocator_free_trimmed) +
          ' more free whose pages trims gave back)' : '');
  }

  function renderDiff(app, data) {
    const live = data.before === null;
    const after = data.after;
    document.title = 'retain: ' + exeName(after.exe) + ' (pid ' + after.pid + '), ' +
        (live ? 'live memory' : 'retained memory');
    const rss = data.rss;
    const host = [];
    const device = [];
    for (const k of rss.tracked || []) (k.domain === 'host' ? host : device).push(kindText(k, data));
    const own = live ? rss.after_level.shim_own : rss.shim_own_growth;
    app.appendChild(header(data, 'retain-diff: ' + (live ? 'live memory' : 'retained memory') + ' of ' +
        after.exe + ' (pid ' + after.pid + ')', [
      ['mode', data.mode + ': ' + data.mode_reason],
      live ? ['snapshot', describeSnapshot(after)] : ['before', describeSnapshot(data.before) + ' pid ' + data.before.pid],
      live ? null : ['after', describeSnapshot(after) + ', ' + toFixedEven(data.seconds_between, 1) + ' s later' +
        (data.requests_between !== null ? ', ' + data.requests_between + ' requests between' : '')],
      ['note', data.estimated ? 'sampled snapshots: byte figures are estimates' : ''],
      ['measure', measureLine(data)],
      ['RSS', 'VmRSS ' + signedBytes(rss.vm_rss_growth) + ', RssAnon+VmSwap ' + signedBytes(rss.anon_swap_growth)],
      ['tracked', host.length ? host.join(', ') : 'nothing'],
      ['device', device.length ? device.join(', ') + ' (device memory, not in RSS)' : ''],
      ['categories', categoriesText(data)],
      ['allocator', signedBytes(rss.allocator_retained_growth) + ' freed but held by malloc'],
      ['untracked', signedBytes(rss.untracked_growth) + ' of anonymous memory no allocation explains' +
        (own > 0 ? '; up to ' + humanBytes(own) + ' of it is retain\'s own arena' : '')],
      ['adds up', data.residency_measured && data.measure === 'resident' ? addsUpText(data) : ''],
      ['explained', data.degraded ? 'not computed: the shim dropped records' : rss.explained_share === null ? '' :
        percent(rss.explained_share) + ' of the RssAnon+VmSwap' + (live ? '' : ' growth') + ' is tracked allocations'],
    ].concat(((data.allocator && data.allocator.advice) || []).map((a) => ['advice', a.setting + ': ' + a.reason]))
      .filter(Boolean)));
    app.appendChild(rssPanel(data));
    let icicle = null;
    if (data.stacks && data.stacks.nodes && data.stacks.nodes.length) {
      icicle = iciclePanel(data, live);
      app.appendChild(icicle.section);
    }
    app.appendChild(diffTable(data, live));
    // Drawn once in the page, where its width is known.
    if (icicle) icicle.draw();
  }

  // The RSS explanation as one bar: its terms add up to RssAnon+VmSwap.
  function rssPanel(data) {
    const level = data.rss.after_level;
    const p = panel('RSS explanation' + (data.before ? ' (at the after snapshot)' : ''), 'rss');
    const terms = [
      {key: 'tracked', name: 'tracked resident', value: level.tracked_anon, color: '#4e79a7'},
      {key: 'allocator', name: 'allocator-held free', value: level.allocator_free_held, color: '#f28e2b'},
      {key: 'untracked', name: 'untracked', value: level.untracked, color: '#bab0ac'},
    ];
    const total = Math.max(1, terms.reduce((s, t) => s + Math.max(0, t.value), 0));
    const bar = el('div', {class: 'rss-bar', role: 'img', 'aria-label': addsUpText(data)});
    for (const t of terms) {
      const share = Math.max(0, t.value) / total;
      const seg = el('div', {class: 'rss-seg', 'data-term': t.key, 'data-bytes': String(t.value),
        style: 'flex-basis:' + (share * 100).toFixed(3) + '%;background:' + t.color,
        title: t.name + ' ' + plainBytes(t.value)});
      if (share > 0.12) seg.textContent = t.name + ' ' + plainBytes(t.value);
      bar.appendChild(seg);
    }
    p.body.appendChild(bar);
    const legend = el('ul', {class: 'rss-legend'});
    terms.forEach((t, k) => {
      legend.appendChild(el('li', {'data-term': t.key}, [el('span', {class: 'swatch', style: 'background:' + t.color}),
        el('span', {text: (k ? '+ ' : '') + t.name + ' '}), el('b', {class: 'rss-value', text: plainBytes(t.value)})]));
    });
    legend.appendChild(el('li', {'data-term': 'anon_swap'}, [el('span', {text: '= RssAnon+VmSwap '}),
      el('b', {class: 'rss-value', text: plainBytes(level.anon_swap)})]));
    p.body.appendChild(legend);
    if (!(data.residency_measured && data.measure === 'resident')) {
      p.body.appendChild(el('p', {class: 'hint', text: 'In allocated bytes tracked memory includes pages never ' +
        'touched, so the untracked rest can be negative: that is the measure, not a bug.'}));
    }
    if (data.rss.adds_up === false) {
      p.body.appendChild(el('p', {class: 'warning', text: 'This explanation does not add up (see the warnings above).'}));
    }
    return p.section;
  }

  function iciclePanel(data, live) {
    const stacks = data.stacks;
    const tree = buildTree(stacks.nodes);
    const measures = data.residency_measured ? ['resident', 'allocated'] : [stacks.measure];
    const state = {measure: stacks.measure, focus: tree.root, query: ''};
    const p = panel((live ? 'Live' : 'Retained') + ' bytes by stack', 'icicle');
    const controls = el('div', {class: 'controls'});
    const measureButtons = measures.map((m) => {
      const b = el('button', {type: 'button', 'data-measure': m, text: m === 'resident' ? 'resident (+ swapped)' : 'allocated'});
      b.addEventListener('click', () => { state.measure = m; draw(); });
      return b;
    });
    controls.appendChild(el('span', {class: 'control-label', text: 'measure:'}));
    measureButtons.forEach((b) => controls.appendChild(b));
    const search = el('input', {type: 'search', placeholder: 'search functions', id: 'icicle-search', 'aria-label': 'search functions'});
    let searchTimer = 0;
    search.addEventListener('input', () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => { state.query = search.value.trim(); draw(); }, 120);
    });
    controls.appendChild(search);
    const reset = el('button', {type: 'button', id: 'icicle-reset', text: 'reset zoom'});
    reset.addEventListener('click', () => { state.focus = tree.root; draw(); });
    controls.appendChild(reset);
    const status = el('span', {class: 'control-note', id: 'icicle-status'});
    controls.appendChild(status);
    p.body.appendChild(controls);
    const box = el('div', {class: 'icicle-box'});
    p.body.appendChild(box);
    const tip = tooltip(box);
    const note = el('p', {class: 'hint', text: 'Outermost caller at the top, each row a frame below it; a bar\'s ' +
      'width is its share of the bytes. Click to zoom, click an ancestor to zoom out.' +
      (stacks.pruned_bytes ? ' ' + humanBytes(stacks.pruned_bytes) + ' in small stacks are merged into "(other)" nodes.' : '')});
    p.body.appendChild(note);
    const ROW = 18;
    const CHAR = 6.6;  // 11px monospace

    function draw() {
      measureButtons.forEach((b) => b.setAttribute('aria-pressed', String(b.getAttribute('data-measure') === state.measure)));
      const valueOf = (n) => nodeBytes(n, state.measure, stacks.measure);
      const width = Math.max(360, box.clientWidth || 960);
      const above = ancestors(tree, state.focus);
      const rects = icicleLayout(tree, state.focus, width, valueOf, 0.5, above.length);
      const found = searchTree(tree, state.query, valueOf);
      const rootBytes = valueOf(tree.nodes[tree.root]);
      const focusBytes = valueOf(tree.nodes[state.focus]);
      let rows = above.length + 1;
      for (const r of rects) rows = Math.max(rows, r.row + 1);
      const height = rows * ROW + 2;
      let html = '';
      const bar = (i, x, w, row, cls) => {
        const node = tree.nodes[i];
        const name = node.name;
        let fill;
        if (found.matches.has(i)) fill = '#d53fd5';
        else if (cls === 'ancestor') fill = '#e8e8e8';
        else fill = colorFor(name, tree.depth[i]);
        const maxChars = Math.floor((w - 6) / CHAR);
        const withBytes = name + ' \u00b7 ' + humanBytes(valueOf(node));
        let label = '';
        if (withBytes.length <= maxChars) label = withBytes;
        else if (maxChars >= 3) label = name.length <= maxChars ? name : name.slice(0, maxChars - 1) + '\u2026';
        html += '<g class="node' + (cls ? ' ' + cls : '') + (found.matches.has(i) ? ' match' : '') +
          '" data-id="' + node.id + '" transform="translate(' + x.toFixed(2) + ',' + (row * ROW) + ')">' +
          '<rect width="' + Math.max(0.5, w - 0.5).toFixed(2) + '" height="' + (ROW - 1) + '" fill="' + fill + '"></rect>' +
          (label ? '<text x="3" y="12.5">' + escapeText(label) + '</text>' : '') + '</g>';
      };
      above.forEach((i, row) => bar(i, 0, width, row, 'ancestor'));
      for (const r of rects) bar(r.i, r.x, r.w, r.row, r.i === state.focus ? 'focus' : '');
      const root = svg('svg', {class: 'icicle', width: width, height: height, viewBox: '0 0 ' + width + ' ' + height,
        'data-measure': state.measure, 'data-root-bytes': String(rootBytes)});
      root.innerHTML = html;
      root.addEventListener('click', (e) => {
        const g = e.target.closest('g.node');
        if (!g) return;
        const i = tree.index.get(Number(g.getAttribute('data-id')));
        state.focus = i;
        draw();
      });
      root.addEventListener('mousemove', (e) => {
        const g = e.target.closest('g.node');
        if (!g) { tip.hide(); return; }
        const i = tree.index.get(Number(g.getAttribute('data-id')));
        const node = tree.nodes[i];
        const r = box.getBoundingClientRect();
        tip.show(nodeDetails(node, state.measure, stacks.measure, data.residency_measured, rootBytes, focusBytes),
          e.clientX - r.left, e.clientY - r.top);
      });
      root.addEventListener('mouseleave', () => tip.hide());
      box.replaceChildren(root, tip.node);
      tip.hide();
      let text = 'all: ' + humanBytes(rootBytes) + ' ' + state.measure;
      if (state.focus !== tree.root) text += ' \u00b7 zoomed on ' + shortName(tree.nodes[state.focus].name) + ': ' + humanBytes(focusBytes);
      if (state.query) {
        text += ' \u00b7 "' + state.query + '": ' + found.matches.size + ' frames, ' + humanBytes(found.bytes) +
          ' (' + percent(rootBytes > 0 ? found.bytes / rootBytes : 0) + ')';
      }
      status.textContent = text;
    }
    let pending = 0;
    window.addEventListener('resize', () => {
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(draw);
    });
    return {section: p.section, draw: draw};
  }

  function nodeDetails(node, measure, dataMeasure, both, rootBytes, focusBytes) {
    const box = el('div');
    box.appendChild(el('div', {class: 'tip-title', text: node.name}));
    const bytes = nodeBytes(node, measure, dataMeasure);
    const lines = [measure + ' ' + humanBytes(bytes) + ' (' + percent(rootBytes > 0 ? bytes / rootBytes : 0) + ' of all' +
      (focusBytes !== rootBytes ? ', ' + percent(focusBytes > 0 ? bytes / focusBytes : 0) + ' of the zoomed' : '') + ')'];
    if (both) {
      const other = otherMeasure(measure);
      lines.push(other + ' ' + humanBytes(nodeBytes(node, other, dataMeasure)));
      if (node.swapped_bytes) lines.push('swapped ' + humanBytes(node.swapped_bytes));
    }
    lines.push(node.count + ' allocation' + (node.count === 1 ? '' : 's'));
    for (const l of lines) box.appendChild(el('div', {text: l}));
    return box;
  }

  // Warm colours by name (a frame keeps its colour when zooming), a domain
  // row cooler, "(other)" grey.
  function colorFor(name, depth) {
    if (name === '(other)') return '#cfcfcf';
    if (depth === 0) return '#b9c4d0';
    if (depth === 1) return '#9ecae1';
    let h = 0;
    for (let k = 0; k < name.length; ++k) h = (h * 31 + name.charCodeAt(k)) >>> 0;
    const hue = 8 + (h % 42);
    const light = 62 + ((h >> 8) % 16);
    return 'hsl(' + hue + ',85%,' + light + '%)';
  }

  function diffTable(data, live) {
    const p = panel('Owners (' + data.owner_count + ', by ' + data.group_by + ')', 'owners');
    const both = data.residency_measured;
    const measure = data.measure;
    const other = otherMeasure(measure);
    const swapped = both && data.total && data.total.retained_swapped_bytes !== 0;
    const domains = [{domain: 'host', total: data.total, name: null}].concat((data.devices || []).map((d) => ({
      domain: d.domain, total: d, name: d.name, uuid: d.uuid})));
    p.body.appendChild(el('p', {class: 'hint', text: 'Click a column to sort by it, an owner to see its whole stack.'}));
    for (const dom of domains) {
      const rows = data.rows.filter((r) => r.owner.domain === dom.domain);
      const totalBytes = dom.total.retained_bytes;
      const share = (r) => (totalBytes > 0 ? r.retained_bytes / totalBytes : 0);
      const columns = [{name: both ? measure : live ? 'live' : 'retained', num: true, value: (r) => r.retained_bytes,
        cell: (r) => plainBytes(r.retained_bytes)}];
      if (both) {
        columns.push({name: other, num: true, value: (r) => rowBytes(r, other, measure),
          cell: (r) => plainBytes(rowBytes(r, other, measure))});
      }
      if (swapped) columns.push({name: 'swapped', num: true, value: (r) => r.retained_swapped_bytes, cell: (r) => plainBytes(r.retained_swapped_bytes)});
      columns.push({name: 'count', num: true, value: (r) => r.retained_count, cell: (r) => String(r.retained_count)});
      columns.push({name: 'share', num: true, value: share, cell: (r) => percent(share(r))});
      if (!live) columns.push({name: 'released', num: true, value: (r) => r.released_bytes, cell: (r) => plainBytes(r.released_bytes)});
      columns.push({name: 'owner (' + data.group_by + ')', value: (r) => r.owner.display, cell: (r) => ownerCell(r, data.group_by, false)});
      const foot = el('tfoot');
      const tr = el('tr', {class: 'total-row'});
      const t = dom.total;
      tr.appendChild(el('td', {class: 'num', text: plainBytes(t.retained_bytes)}));
      if (both) {
        tr.appendChild(el('td', {class: 'num', text: dom.domain === 'host' ? plainBytes(rowBytes(t, other, measure)) : plainBytes(t.retained_bytes)}));
      }
      if (swapped) tr.appendChild(el('td', {class: 'num', text: plainBytes(t.retained_swapped_bytes || 0)}));
      tr.appendChild(el('td', {class: 'num', text: String(t.retained_count)}));
      tr.appendChild(el('td'));
      if (!live) tr.appendChild(el('td', {class: 'num', text: plainBytes(t.released_bytes)}));
      tr.appendChild(el('td', {text: dom.domain === 'host' ? 'total' : 'total ' + dom.domain}));
      foot.appendChild(tr);
      if (dom.domain !== 'host') {
        p.body.appendChild(el('h3', {text: dom.domain + (dom.name ? ' (' + dom.name + (dom.uuid ? ', ' + dom.uuid : '') + ')' : '') +
          ': device memory (committed when allocated: resident = allocated; not RSS)'}));
      }
      const table = sortableTable(columns, rows, (r) => framesList(r.owner), {after: foot});
      table.setAttribute('data-domain', dom.domain);
      p.body.appendChild(el('div', {class: 'table-wrap'}, [table]));
    }
    return p.section;
  }

  // ------------------------------------------------------------------

  function main() {
    const app = document.getElementById('app');
    const source = document.getElementById('retain-data');
    if (!app) return;
    let data;
    try {
      data = JSON.parse(source ? source.textContent : '');
    } catch (e) {
      app.replaceChildren(el('p', {class: 'warning', text: 'This report holds no readable data (' + e.message + ').'}));
      return;
    }
    app.replaceChildren();
    if (data.schema === 'retain-trend/1') renderTrend(app, data);
    else if (data.schema === 'retain-diff/1') renderDiff(app, data);
    else app.appendChild(el('p', {class: 'warning', text: 'Unknown schema ' + JSON.stringify(data.schema) + '.'}));
    app.setAttribute('data-ready', 'true');
  }

  global.RetainReport = api;
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})(typeof globalThis !== 'undefined' ? globalThis : this);
