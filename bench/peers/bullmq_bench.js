// BullMQ driver for bench/peers.py: node bullmq_bench.js enqueue|latency|worker|info --url URL [--n N] [--bulk] [--rate R]
// bullmq is installed by bench/peers.py into bench/.peers/node (BULLMQ_DIR points there).
// Worker: one BullMQ Worker per process, concurrency 10, default job retention
// (completed jobs are kept). Stats: the same JSON files as benchrec.py.
// --kind sleep|async_sleep (bench/runtime.py): jobs that wait --seconds on a
// timer. Node has no blocking sleep to run: its waits are all asynchronous,
// so both kinds are the same timer here.
'use strict';
const fs = require('fs');
const path = require('path');
const bullmqDir = process.env.BULLMQ_DIR || path.join(__dirname, '..', '.peers', 'node', 'node_modules', 'bullmq');
const { Queue, Worker } = require(bullmqDir);

const args = process.argv.slice(2);
const mode = args[0];
const opt = (name, dflt) => { const i = args.indexOf('--' + name); return i < 0 ? dflt : args[i + 1]; };
const url = new URL(opt('url'));
const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null };
const n = Number(opt('n', '0'));
const offset = Number(opt('offset', '0'));
const bulk = args.includes('--bulk');
const rate = Number(opt('rate', '200'));
const kind = opt('kind', 'noop');
const seconds = Number(opt('seconds', '0.05'));
const QUEUE = 'bench';
const now = () => (performance.timeOrigin + performance.now()) / 1000;
const emit = (o) => console.log('BENCH ' + JSON.stringify(o));

const state = { pid: process.pid, count: 0, first: null, last: null, buckets: {}, lat: [] };
let dirty = false;
function hit(ts, began) {
  const start = began === undefined ? now() : began;
  if (state.first === null || start < state.first) state.first = start;
  if (ts > 1e9) state.lat.push(start - ts);
  const end = now();
  state.count += 1;
  state.last = end;
  const b = Math.floor(end * 100);
  state.buckets[b] = (state.buckets[b] || 0) + 1;
  dirty = true;
}
function writeStats() {
  const dir = process.env.BENCH_STATS_DIR;
  if (!dir || !dirty) return;
  dirty = false;
  const p = path.join(dir, `${process.pid}.json`);
  fs.writeFileSync(p + '.tmp', JSON.stringify(state));
  fs.renameSync(p + '.tmp', p);
}

function makeJob(i) {
  return kind === 'noop' ? { name: 'job', data: { ts: i } } : { name: kind === 'sleep' ? 'nap' : 'anap', data: { s: seconds } };
}

async function main() {
  if (mode === 'info') {
    const pkg = JSON.parse(fs.readFileSync(path.join(bullmqDir, 'package.json')));
    emit({ version: pkg.version, bulk: 'addBulk', worker: 'concurrency 10' });
    return;
  }
  if (mode === 'worker') {
    setInterval(writeStats, 200);
    const handler = async (job) => {
      if (job.name === 'job') { hit(job.data.ts); return; }
      const began = now();
      await new Promise((r) => setTimeout(r, job.data.s * 1000));
      hit(0, began);
    };
    const worker = new Worker(QUEUE, handler, { connection, concurrency: 10 });
    const stop = async () => { await worker.close(); writeStats(); process.exit(0); };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    return;
  }
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  const t0 = performance.now();
  if (mode === 'enqueue' && bulk) {
    for (let s = 0; s < n; s += 10000) {
      const jobs = [];
      for (let i = s; i < Math.min(n, s + 10000); i++) jobs.push(makeJob(offset + i));
      await queue.addBulk(jobs);
    }
  } else if (mode === 'enqueue') {
    for (let i = 0; i < n; i++) { const j = makeJob(offset + i); await queue.add(j.name, j.data); }
  } else if (mode === 'latency') {
    const start = performance.now();
    for (let k = 0; k < n; k++) {
      const wait = start + (k * 1000) / rate - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      await queue.add('job', { ts: now() });
    }
  }
  emit({ n, seconds: (performance.now() - t0) / 1000 });
  await queue.close();
}

main().catch((e) => { console.error(e); process.exit(1); });
