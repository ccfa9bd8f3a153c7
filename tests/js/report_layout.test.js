// report_layout.test.js: the page's geometry and data shaping, without a browser:
// scales and ticks, stacking and top-N aggregation of series, the request a point
// stands for, the icicle's layout (widths proportional to bytes, zoom), search, and
// table sorting.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const report = require('../../tools/report/report.js');

const MiB = 1024 * 1024;

test('linearScale maps and inverts', () => {
  const s = report.linearScale(1, 16, 78, 1000);
  assert.equal(s(1), 78);
  assert.equal(s(16), 1000);
  assert.equal(s(8.5), 539);
  assert.equal(s.invert(539), 8.5);
  const y = report.linearScale(0, 96 * MiB, 336, 14);  // bytes up, pixels down
  assert.equal(y(0), 336);
  assert.equal(y(96 * MiB), 14);
  assert.equal(y(48 * MiB), 175);
  // A domain of one point does not divide by zero.
  assert.ok(Number.isFinite(report.linearScale(5, 5, 0, 100)(5)));
});

test('niceTicks: steps of 1, 2 or 5 x 10^k, integers for request counts', () => {
  assert.deepEqual(report.niceTicks(1, 16, 8, true), [2, 4, 6, 8, 10, 12, 14, 16]);
  assert.deepEqual(report.niceTicks(0, 1000, 5, true), [0, 200, 400, 600, 800, 1000]);
  assert.deepEqual(report.niceTicks(1, 3, 10, true), [1, 2, 3]);  // never a step below 1
  assert.deepEqual(report.niceTicks(0, 1, 4, false), [0, 0.5, 1]);  // 0.25 is not 1, 2 or 5 x 10^k
  assert.deepEqual(report.niceTicks(0, 1, 5, false), [0, 0.2, 0.4, 0.6, 0.8, 1]);
  assert.deepEqual(report.niceTicks(7, 7, 5, true), [7]);
});

test('byteTicks: powers of two, round figures in the tool\'s units', () => {
  const t = report.byteTicks(92.6 * MiB, 5);
  assert.equal(t.step, 32 * MiB);
  assert.deepEqual(t.ticks.map(report.humanBytes), ['0 B', '32.0 MiB', '64.0 MiB', '96.0 MiB']);
  assert.equal(t.top, 96 * MiB);
  const small = report.byteTicks(3000, 4);
  assert.deepEqual(small.ticks, [0, 1024, 2048, 3072]);
  assert.deepEqual(small.ticks.map(report.humanBytes), ['0 B', '1.0 KiB', '2.0 KiB', '3.0 KiB']);
  assert.deepEqual(report.byteTicks(0, 5).ticks, [0]);
  // The top tick is at or above the largest value.
  for (const max of [1, 1000, 123456789, 5e12]) {
    const r = report.byteTicks(max, 5);
    assert.ok(r.top >= max && r.ticks[r.ticks.length - 1] === r.top, String(max));
    assert.ok(r.ticks.length >= 3 && r.ticks.length <= 11, String(max));
  }
});

test('stackBands: each band sits on the sum of those below', () => {
  const s = report.stackBands([[1, 2, 3], [10, 10, 10], [0, 5, -1]]);
  assert.deepEqual(s[0], {lo: [0, 0, 0], hi: [1, 2, 3]});
  assert.deepEqual(s[1], {lo: [1, 2, 3], hi: [11, 12, 13]});
  assert.deepEqual(s[2], {lo: [11, 12, 13], hi: [11, 17, 13]});  // a negative value adds nothing
  assert.deepEqual(report.stackBands([]), []);
});

function owner(name, values) {
  return {owner: {key: name, display: name, domain: 'host'}, verdict: 'flat', live_bytes: values};
}

test('topOwners: the N largest by peak, the rest one "other" band on top', () => {
  const rows = [owner('small', [1, 1, 1]), owner('trie', [4, 8, 12]), owner('cache', [0, 16, 16]),
    owner('tiny', [0, 0, 2]), owner('mid', [5, 5, 5])];
  const m = report.topOwners(rows, 2);
  assert.deepEqual(m.bands.map((b) => (b.other ? 'other' : b.row.owner.key)), ['cache', 'trie', 'other']);
  assert.deepEqual(m.bands.map((b) => b.rank), [0, 1, 2]);
  const other = m.bands[2];
  assert.equal(other.count, 3);
  assert.deepEqual(other.values, [6, 6, 8]);  // mid + small + tiny
  assert.deepEqual(m.stacked[2].hi, [10, 30, 36]);  // the stack's top is the sum of every owner
  const sums = [0, 1, 2].map((i) => rows.reduce((s, r) => s + r.live_bytes[i], 0));
  assert.deepEqual(m.stacked[2].hi, sums);
});

test('topOwners stacks owners that stopped growing below those still growing', () => {
  const leak = {...owner('leak', [4, 8, 12, 16, 20]), verdict: 'linear'};
  const cache = {...owner('cache', [0, 4, 8, 8, 8]), verdict: 'plateau'};
  const small = {...owner('small-leak', [1, 2, 3, 4, 5]), verdict: 'linear'};
  const warm = {...owner('warm', [2, 2, 2, 2, 2]), verdict: 'warm-up'};
  const m = report.topOwners([leak, small, cache, warm], 10);
  assert.deepEqual(m.bands.map((b) => b.row.owner.key), ['cache', 'warm', 'leak', 'small-leak']);
  assert.deepEqual(m.bands.map((b) => b.rank), [1, 3, 0, 2]);  // colours and legend by size
  assert.deepEqual(m.stacked[0].hi, [0, 4, 8, 8, 8]);  // the cache's top: flat on the baseline
  assert.deepEqual(m.stacked[2].lo, [2, 6, 10, 10, 10]);
  assert.deepEqual(m.stacked[2].hi, [6, 14, 22, 26, 30]);
});

test('topOwners: no "other" band for one owner left over, nor when all fit', () => {
  const rows = [owner('a', [3]), owner('b', [2]), owner('c', [1])];
  assert.equal(report.topOwners(rows, 2).bands.filter((b) => b.other).length, 0);
  assert.equal(report.topOwners(rows, 2).bands.length, 3);
  assert.equal(report.topOwners(rows, 10).bands.length, 3);
  assert.deepEqual(report.topOwners([], 10).bands, []);
});

test('topOwners: equal peaks keep the tool\'s order', () => {
  const rows = [owner('first', [2]), owner('second', [2]), owner('third', [2])];
  assert.deepEqual(report.topOwners(rows, 5).bands.map((b) => b.row.owner.key), ['first', 'second', 'third']);
});

test('topOwners over 1,000 snapshots and 500 owners draws 11 bands', () => {
  const xs = Array.from({length: 1000}, (_, i) => i);
  const rows = Array.from({length: 500}, (_, k) => owner('o' + k, xs.map((x) => x * (k + 1))));
  const m = report.topOwners(rows, 10);
  assert.equal(m.bands.length, 11);
  assert.equal(m.bands[0].row.owner.key, 'o499');
  assert.equal(m.bands[0].rank, 0);
  assert.equal(m.bands[10].count, 490);
  const total = rows.reduce((s, r) => s + r.live_bytes[999], 0);
  assert.equal(m.stacked[10].hi[999], total);
});

test('nearestIndex picks the snapshot nearest the pointer', () => {
  const xs = [1, 2, 4, 4, 8];
  assert.equal(report.nearestIndex(xs, 0), 0);
  assert.equal(report.nearestIndex(xs, 1.4), 0);
  assert.equal(report.nearestIndex(xs, 1.6), 1);
  assert.equal(report.nearestIndex(xs, 4.1), 2);  // the first of equal x
  assert.equal(report.nearestIndex(xs, 3.5), 2);
  assert.equal(report.nearestIndex(xs, 7), 4);
  assert.equal(report.nearestIndex(xs, 100), 4);
  assert.equal(report.nearestIndex([], 1), -1);
});

test('requestsAt: the requests that ended since the previous snapshot, and those open at it', () => {
  const tag = (id, end, snapshot) => ({tag_id: id, end_ordinal: end, snapshot: snapshot});
  const tags = [tag(1, 1, 0), tag(2, 2, 1), tag(3, 3, 2), tag(4, 4, 2), tag(5, 5, 2), tag(6, null, 2)];
  const xs = [1, 2, 5];  // snapshot 2 came after three more requests ended
  assert.deepEqual(report.requestsAt(tags, xs, 0).map((t) => t.tag_id), [1]);
  assert.deepEqual(report.requestsAt(tags, xs, 1).map((t) => t.tag_id), [2]);
  assert.deepEqual(report.requestsAt(tags, xs, 2).map((t) => t.tag_id), [3, 4, 5, 6]);
  assert.deepEqual(report.requestsAt(null, xs, 0), []);
  assert.deepEqual(report.requestsAt(tags, xs, 3), []);
});

// all(100) -> host(100) -> main(100) -> {a(60) -> a1(60), b(30), c(0.3)}; main holds 9.7 itself.
function sampleTree() {
  const n = (id, parent, name, bytes) => ({id, parent, name, bytes, allocated_bytes: 2 * bytes,
    resident_bytes: bytes - 1 > 0 ? bytes - 1 : 0, swapped_bytes: bytes > 1 ? 1 : 0, count: 1});
  return [n(0, -1, 'all', 100), n(1, 0, 'host', 100), n(2, 1, 'main', 100), n(3, 2, 'b', 30),
    n(4, 2, 'a', 60), n(5, 4, 'a1', 60), n(6, 2, 'c', 0.3)];
}

test('buildTree and ancestors', () => {
  const tree = report.buildTree(sampleTree());
  assert.equal(tree.root, 0);
  assert.deepEqual(tree.children[2], [3, 4, 6]);
  assert.deepEqual(tree.depth, [0, 1, 2, 3, 3, 4, 3]);
  assert.deepEqual(report.ancestors(tree, 5), [0, 1, 2, 4]);
  assert.deepEqual(report.ancestors(tree, 0), []);
});

test('icicleLayout: widths proportional to bytes, heaviest on the left, small ones dropped', () => {
  const tree = report.buildTree(sampleTree());
  const value = (n) => n.bytes;
  const rects = report.icicleLayout(tree, tree.root, 1000, value, 1, 0);
  const by = Object.fromEntries(rects.map((r) => [tree.nodes[r.i].name, r]));
  assert.deepEqual(Object.keys(by).sort(), ['a', 'a1', 'all', 'b', 'c', 'host', 'main']);
  assert.equal(by.all.w, 1000);
  assert.equal(by.main.w, 1000);
  assert.equal(by.a.w, 600);
  assert.equal(by.a.x, 0);
  assert.equal(by.b.w, 300);
  assert.equal(by.b.x, 600);
  assert.equal(by.a1.w, 600);
  assert.ok(Math.abs(by.c.w - 3) < 1e-9);
  assert.ok(Math.abs(by.c.x - 900) < 1e-9);  // main's own 9.7 bytes are the gap on the right
  assert.deepEqual([by.all.row, by.host.row, by.main.row, by.a.row, by.a1.row], [0, 1, 2, 3, 4]);
  // c is 0.3 of 100 bytes: 3 px at 1000 px, dropped at a 5 px minimum.
  assert.ok(!report.icicleLayout(tree, tree.root, 1000, value, 5, 0).some((r) => tree.nodes[r.i].name === 'c'));
});

test('icicleLayout: zoom makes a node the whole width, below its ancestors', () => {
  const tree = report.buildTree(sampleTree());
  const a = tree.index.get(4);
  const above = report.ancestors(tree, a);
  const rects = report.icicleLayout(tree, a, 800, (n) => n.bytes, 0.5, above.length);
  assert.deepEqual(rects.map((r) => [tree.nodes[r.i].name, r.x, r.w, r.row]), [['a', 0, 800, 3], ['a1', 0, 800, 4]]);
});

test('icicleLayout in another measure', () => {
  const tree = report.buildTree(sampleTree());
  const allocated = (n) => report.nodeBytes(n, 'allocated', 'resident');
  const rects = report.icicleLayout(tree, tree.root, 1000, allocated, 0.5, 0);
  assert.equal(rects.find((r) => tree.nodes[r.i].name === 'b').w, 300);  // the same shares here
  assert.equal(report.nodeBytes(tree.nodes[3], 'resident', 'allocated'), 30);  // resident + swapped
  assert.equal(report.nodeBytes(tree.nodes[3], 'allocated', 'allocated'), 30);  // the data's own: "bytes"
  assert.equal(report.nodeBytes(tree.nodes[3], 'allocated', 'resident'), 60);
  assert.deepEqual(report.icicleLayout(tree, tree.root, 1000, () => 0, 0.5, 0), []);
});

test('icicleLayout of a 5,000-node tree stays within its width', () => {
  const nodes = [{id: 0, parent: -1, name: 'all', bytes: 0}];
  for (let i = 1; i < 5000; ++i) nodes.push({id: i, parent: Math.floor((i - 1) / 4), name: 'f' + i, bytes: 0});
  for (let i = nodes.length - 1; i >= 0; --i) {
    const kids = nodes.filter((n) => n.parent === i);
    nodes[i].bytes = kids.length ? kids.reduce((s, k) => s + k.bytes, 0) : 1 + (i % 7);
  }
  const tree = report.buildTree(nodes);
  const rects = report.icicleLayout(tree, tree.root, 1200, (n) => n.bytes, 0.5, 0);
  for (const r of rects) {
    assert.ok(r.x >= -1e-9 && r.x + r.w <= 1200 + 1e-6, JSON.stringify(r));
    assert.ok(r.w >= 0.5);
  }
  assert.ok(rects.length > 1000 && rects.length <= 5000);
});

test('searchTree: matches by name, bytes counted once', () => {
  const nodes = sampleTree();
  nodes[5].name = 'a-inner';  // under main: matches 'in' as main does, not counted twice
  const tree = report.buildTree(nodes);
  const found = report.searchTree(tree, 'IN', (n) => n.bytes);
  assert.deepEqual([...found.matches].map((i) => tree.nodes[i].name).sort(), ['a-inner', 'main']);
  assert.equal(found.bytes, 100);  // main (100) covers a-inner (60)
  assert.equal(report.searchTree(tree, 'a-', (n) => n.bytes).bytes, 60);
  const b = report.searchTree(tree, 'b', (n) => n.bytes);
  assert.equal(b.bytes, 30);
  assert.equal(report.searchTree(tree, '', (n) => n.bytes).matches.size, 0);
  assert.equal(report.searchTree(tree, 'zzz', (n) => n.bytes).bytes, 0);
});

test('sortRows: by number or text, both ways, stable', () => {
  const rows = [{n: 2, s: 'b'}, {n: 10, s: 'A'}, {n: 2, s: 'c'}, {n: -1, s: 'a'}];
  const byN = {value: (r) => r.n};
  const byS = {value: (r) => r.s};
  assert.deepEqual(report.sortRows(rows, byN, true).map((r) => r.s), ['A', 'b', 'c', 'a']);
  assert.deepEqual(report.sortRows(rows, byN, false).map((r) => r.s), ['a', 'b', 'c', 'A']);
  assert.deepEqual(report.sortRows(rows, byS, false).map((r) => r.s), ['A', 'a', 'b', 'c']);  // case-insensitive
  assert.deepEqual(report.sortRows(rows, byS, true).map((r) => r.s), ['c', 'b', 'A', 'a']);
  assert.deepEqual(rows.map((r) => r.s), ['b', 'A', 'c', 'a']);  // the input is left alone
});

test('rowBytes reads a diff row in either measure', () => {
  const row = {retained_bytes: 40, retained_allocated_bytes: 400, retained_resident_bytes: 38,
    retained_swapped_bytes: 2, released_bytes: 5, released_allocated_bytes: 50, released_resident_bytes: 5,
    released_swapped_bytes: 0};
  assert.equal(report.rowBytes(row, 'resident', 'resident'), 40);
  assert.equal(report.rowBytes(row, 'allocated', 'resident'), 400);
  assert.equal(report.rowBytes(row, 'resident', 'allocated'), 40);
  assert.equal(report.rowBytes(row, 'allocated', 'resident', 'released'), 50);
});
