// The log view's text filter over a million buffered lines, two ways side by
// side in one run (node, the V8 that Chromium runs): as the panel filtered
// before 2026-11-26 (who and message joined, each lowered, then `includes`)
// and as src/sections/logs/toolbar.ts filters now (one case-insensitive pattern tested
// on the message, then on who). Rounds alternate; medians are reported.
//
//     node benchmarks/log_filter.js [lines] [rounds]
'use strict';

const n = Number(process.argv[2] || 1000000);
const rounds = Number(process.argv[3] || 7);
const lines = [];
for (let i = 0; i < n; i++) {
  lines.push({
    worker: `tcp://127.0.0.1:4${i % 4}123`,
    source: 'worker',
    message: `line ${String(i).padStart(7, '0')} of a steady stream of log output`
  });
}
const text = 'line 012'; // 10,000 of a million, as benchmarks/panel.py types

function before() {
  const lowered = text.toLowerCase();
  let found = 0;
  for (const line of lines) {
    if (`${line.worker ?? line.source} ${line.message}`.toLowerCase().includes(lowered)) {
      found++;
    }
  }
  return found;
}

function now() {
  const pattern = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
  let found = 0;
  for (const line of lines) {
    if (pattern.test(line.message) || pattern.test(line.worker ?? line.source)) {
      found++;
    }
  }
  return found;
}

const times = { before: [], now: [] };
for (let r = 0; r < rounds; r++) {
  for (const f of r % 2 ? [now, before] : [before, now]) {
    const start = process.hrtime.bigint();
    const found = f();
    times[f.name].push(Number(process.hrtime.bigint() - start) / 1e6);
    if (found !== n / 100) {
      throw new Error(`${f.name} found ${found}, not ${n / 100}`);
    }
  }
}
const median = xs => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const [name, xs] of Object.entries(times)) {
  console.log(`${name}: median ${median(xs).toFixed(1)} ms over ${rounds} rounds`);
}
