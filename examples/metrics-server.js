// A service that exports its GPU memory to Prometheus: an allocator in use, a pinned pool, and
// the device's free memory, served at /metrics for the Prometheus a fleet already runs.
// Run: node examples/metrics-server.js [--port 9464] [--simulate]
//   then: curl localhost:9464/metrics
// Needs prom-client, an optional dependency of cuda-memory (npm install prom-client); without it
// the example says so and exits 2. Without a GPU, or with --simulate, the allocator runs on a
// simulated 80 GiB device: the same policy code and statistics, no memory behind them.
'use strict';
const http = require('http');
const cm = require('cuda-memory');
const { registerMetrics } = require('cuda-memory/metrics');

let client;
try {
  client = require('prom-client');
} catch (e) {
  if (e.code !== 'MODULE_NOT_FOUND') throw e;
  console.error('metrics-server.js needs prom-client, an optional dependency of cuda-memory: npm install prom-client');
  process.exit(2);
}

const args = process.argv.slice(2);
const port = args.includes('--port') ? Number(args[args.indexOf('--port') + 1]) : 9464;
const simulate = args.includes('--simulate') || !cm.status().available;
const MiB = 2 ** 20;

const allocator = cm.createAllocator(
  simulate
    ? { simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true, memoryLimit: 8 * 2 ** 30 }
    : { allowGrowth: true, memoryLimit: 8 * 2 ** 30 },
);
const pinnedPool = simulate ? null : cm.createPinnedPool({ memoryLimit: 256 * MiB });

const registry = new client.Registry();
client.collectDefaultMetrics({ register: registry });
registerMetrics(registry, {
  allocators: { main: allocator },
  pinnedPools: pinnedPool ? { staging: pinnedPool } : undefined,
  devices: !simulate,
});

// The "work": tensors of a few sizes come and go, a few stay alive for a while.
const live = [];
let step = 0;
const work = setInterval(() => {
  step++;
  live.push(allocator.alloc((1 + (step % 7)) * 16 * MiB));
  if (live.length > 12) live.splice(step % live.length, 1)[0].free();
  if (pinnedPool) pinnedPool.alloc(4 * MiB).free();
}, 50);

const server = http.createServer(async (req, res) => {
  if (req.url !== '/metrics') {
    res.writeHead(404).end('try /metrics\n');
    return;
  }
  res.writeHead(200, { 'Content-Type': registry.contentType });
  res.end(await registry.metrics());
});

server.listen(port, '127.0.0.1', () => {
  console.log(`metrics at http://127.0.0.1:${server.address().port}/metrics (${simulate ? 'simulated device' : `device 0`})`);
});

function stop() {
  clearInterval(work);
  server.close();
  for (const b of live) b.free();
  allocator.close();
  if (pinnedPool) pinnedPool.close();
}
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
