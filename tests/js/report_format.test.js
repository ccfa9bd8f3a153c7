// report_format.test.js: the page's numbers are the tool's (tools/lib/byte_size.cc,
// diff_format.cc's VerdictDetail), tested on the figures the tool's own tests use
// and on the rounding cases where JavaScript and C's printf differ.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const report = require('../../tools/report/report.js');

const MiB = 1024 * 1024;

test('humanBytes writes bytes as HumanBytes does', () => {
  const cases = [
    [0, '0 B'], [1, '1 B'], [512, '512 B'], [1023, '1023 B'], [1024, '1.0 KiB'],
    [1536, '1.5 KiB'], [126 * MiB, '126.0 MiB'], [8 * 1024 * MiB, '8.0 GiB'],
    [1024 * 1024 - 1, '1.0 MiB'],  // switches unit before rounding would print 1024.0 KiB
    [1023.9 * 1024, '1023.9 KiB'], [4194304, '4.0 MiB'], [84016733, '80.1 MiB'],
    [207456, '202.6 KiB'], [56729, '55.4 KiB'],
  ];
  for (const [bytes, text] of cases) assert.equal(report.humanBytes(bytes), text, String(bytes));
});

test('humanBytes rounds an exact tie to even, as printf does', () => {
  // 1280 B is exactly 1.25 KiB: printf("%.1f") says 1.2, toFixed(1) would say 1.3.
  assert.equal((1.25).toFixed(1), '1.3');
  assert.equal(report.humanBytes(1280), '1.2 KiB');
  assert.equal(report.humanBytes(1792), '1.8 KiB');  // 1.75 -> 1.8 (8 is even)
  assert.equal(report.humanBytes(2.25 * MiB), '2.2 MiB');
  assert.equal(report.humanBytes(2.75 * MiB), '2.8 MiB');
  assert.equal(report.toFixedEven(0.125, 2), '0.12');
  assert.equal(report.toFixedEven(0.375, 2), '0.38');
  assert.equal(report.toFixedEven(-1.25, 1), '-1.2');
  assert.equal(report.toFixedEven(0.15, 1), '0.1');  // 0.15 is 0.1499999...: below the tie
  assert.equal(report.toFixedEven(2.5, 0), '2');
  assert.equal(report.toFixedEven(3.5, 0), '4');
});

test('a non-integer byte figure is rounded first (llround: halves away from zero)', () => {
  assert.equal(report.llround(2.5), 3);
  assert.equal(report.llround(-2.5), -3);
  assert.equal(report.humanBytes(1023.5), '1.0 KiB');
  assert.equal(report.humanBytes(-5), '0 B');  // HumanBytes of a figure clamped at 0
  assert.equal(report.signedBytes(4201292.979020979), '+4.0 MiB');
});

test('signedBytes and plainBytes', () => {
  assert.equal(report.signedBytes(0), '0 B');
  assert.equal(report.signedBytes(1536), '+1.5 KiB');
  assert.equal(report.signedBytes(-300), '-300 B');
  assert.equal(report.signedBytes(-MiB), '-1.0 MiB');
  assert.equal(report.plainBytes(-MiB), '-1.0 MiB');
  assert.equal(report.plainBytes(MiB), '1.0 MiB');
});

test('formatG is printf %g', () => {
  const cases = [[0, '0'], [5, '5'], [5.5, '5.5'], [16, '16'], [123456, '123456'],
    [1234567, '1.23457e+06'], [1e6, '1e+06'], [0.0001, '0.0001'], [0.00001, '1e-05'],
    [2.5, '2.5'], [1 / 3, '0.333333'], [-42, '-42']];
  for (const [x, text] of cases) assert.equal(report.formatG(x), text, String(x));
});

test('percent', () => {
  assert.equal(report.percent(0.950064738539978), '95.0%');
  assert.equal(report.percent(0.799), '79.9%');
  assert.equal(report.percent(0), '0.0%');
  assert.equal(report.percent(1), '100.0%');
});

test('verdictDetail writes the "per request / level" column', () => {
  const linear = {verdict: 'linear', bytes_per_request: 4194304, fit: 1, estimated: false};
  assert.equal(report.verdictDetail(linear, 'request'), '+4.0 MiB/request (fit 1.00)');
  assert.equal(report.verdictDetail({...linear, bytes_per_request: 896, fit: 0.9999}, 'request'),
    '+896 B/request (fit 1.00)');
  assert.equal(report.verdictDetail({...linear, fit: 0.875}, 'snapshot'),
    '+4.0 MiB/snapshot (fit 0.88)');
  const plateau = {verdict: 'plateau', level: 16 * MiB, flat_from_request: 5, band_low: 0, band_high: 0};
  assert.equal(report.verdictDetail(plateau, 'request'), 'at 16.0 MiB from request 5');
  assert.equal(report.verdictDetail({...plateau, band_low: 15 * MiB, band_high: 17 * MiB}, 'request'),
    'at 16.0 MiB (15.0 MiB..17.0 MiB) from request 5');
  assert.equal(report.verdictDetail({...plateau, flat_from_request: 5.5}, 'request'),
    'at 16.0 MiB from request 5.5');
  assert.equal(report.verdictDetail({verdict: 'warm-up', level: 2 * MiB, flat_from_request: 1}, 'request'),
    'one step to 2.0 MiB at request 1');
  assert.equal(report.verdictDetail({verdict: 'flat', growth: 0}, 'request'), '0 B overall');
  assert.equal(report.verdictDetail({verdict: 'noise', growth: 1331}, 'request'), '+1.3 KiB overall');
  assert.equal(report.verdictDetail({verdict: 'noise', growth: -504}, 'request'), '-504 B overall');
  assert.equal(report.verdictDetail({verdict: 'too-few', request_counts: 3}, 'request'),
    '3 request counts; a verdict needs 4');
});

test('verdictDetail of sampled series gives one standard error', () => {
  const linear = {verdict: 'linear', bytes_per_request: 4194304, fit: 0.98, estimated: true,
    bytes_per_request_error: 52429};
  assert.equal(report.verdictDetail(linear, 'request'), '+4.0 MiB/request \u00b151.2 KiB (fit 0.98)');
  const plateau = {verdict: 'plateau', level: 16 * MiB, flat_from_request: 5, band_low: 0, band_high: 0,
    estimated: true, live_bytes_error: [0, 1024, 2048]};
  assert.equal(report.verdictDetail(plateau, 'request'), 'at 16.0 MiB \u00b12.0 KiB from request 5');
});

test('shortName keeps the last two parts of a qualified name and its file:line', () => {
  assert.equal(report.shortName('retain::examples::PrefixTrie::Insert (inference.cc:140)'),
    'PrefixTrie::Insert (inference.cc:140)');
  assert.equal(report.shortName('OPENSSL_LH_insert'), 'OPENSSL_LH_insert');
  assert.equal(report.shortName('libstdc++.so.6+0xa57ba'), 'libstdc++.so.6+0xa57ba');
  assert.equal(report.shortName('std::vector<a::b, c::d>::_M_realloc (stl_vector.h:12)'),
    'vector::_M_realloc (stl_vector.h:12)');  // template arguments dropped
});
