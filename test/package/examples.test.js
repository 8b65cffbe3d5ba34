'use strict';
// Every example runs as a user runs it, through the public API only (`require('cuda-memory')`
// resolves to this package by its own name): on a GPU for real, and without one on a simulated
// device or with its one-line "no GPU" exit. Each ends with status 0 and nothing on stderr.
const fs = require('fs');
const path = require('path');
const http = require('http');
const { spawn, spawnSync } = require('child_process');
const { root, gpu, tempDir } = require('../helpers');

const dir = path.join(root, 'examples');
const examples = fs.readdirSync(dir).filter((f) => f.endsWith('.js'));
const env = { ...process.env, CUDA_MEMORY_SHM_DIR: tempDir('cuda-memory-examples-') };

test("the examples reach the package only by its name and its entry points (package.json's exports)", () => {
  const entries = Object.keys(require(path.join(root, 'package.json')).exports).map((k) =>
    k === '.' ? 'cuda-memory' : `cuda-memory/${k.slice(2)}`,
  );
  for (const f of examples) {
    const text = fs.readFileSync(path.join(dir, f), 'utf8');
    const named = [...text.matchAll(/require\('(cuda-memory(?:\/[^']*)?)'\)/g)].map((m) => m[1]);
    expect(named.length).toBeGreaterThan(0);
    expect({ f, deep: named.filter((n) => !entries.includes(n)) }).toEqual({ f, deep: [] });
  }
});

describe(`the examples (${gpu ? 'on the GPU' : 'without a GPU'})`, () => {
  for (const f of examples.filter((x) => x !== 'metrics-server.js' && x !== 'llama-beside-service.js'))
    test(`node examples/${f}`, () => {
      const r = spawnSync(process.execPath, [path.join(dir, f)], { cwd: root, env, encoding: 'utf8', timeout: 240000 });
      expect({ status: r.status, signal: r.signal, stderr: r.stderr.replace(/^\r?\d+\/\d+\r?/gm, '').trim() }).toEqual({
        status: 0,
        signal: null,
        stderr: '',
      });
      expect(r.stdout.length).toBeGreaterThan(0);
    });

  test('node examples/metrics-server.js serves /metrics', async () => {
    const port = 20000 + (process.pid % 20000);
    const child = spawn(process.execPath, [path.join(dir, 'metrics-server.js'), '--port', String(port)], { cwd: root, env });
    try {
      await new Promise((resolve, reject) => {
        child.stdout.on('data', (d) => String(d).includes('metrics at') && resolve());
        child.once('exit', (c) => reject(new Error(`exited with ${c}`)));
      });
      const body = await new Promise((resolve, reject) =>
        http
          .get(`http://127.0.0.1:${port}/metrics`, (res) => {
            let text = '';
            res.on('data', (d) => (text += d));
            res.on('end', () => resolve(text));
          })
          .on('error', reject),
      );
      expect(body).toMatch(/^cuda_memory_allocator_in_use_bytes\{allocator="main"/m);
    } finally {
      child.kill();
    }
  });
});

test('node examples/metrics-server.js without prom-client (an optional dependency) says so in one line and exits 2', () => {
  // A copy of the example in an application that has cuda-memory and not prom-client.
  const app = tempDir('cuda-memory-no-prom-');
  fs.mkdirSync(path.join(app, 'node_modules'));
  fs.symlinkSync(root, path.join(app, 'node_modules', 'cuda-memory'));
  fs.copyFileSync(path.join(dir, 'metrics-server.js'), path.join(app, 'metrics-server.js'));
  const r = spawnSync(process.execPath, [path.join(app, 'metrics-server.js'), '--simulate'], {
    cwd: app,
    env,
    encoding: 'utf8',
    timeout: 60000,
  });
  expect({ status: r.status, stderr: r.stderr }).toEqual({
    status: 2,
    stderr: 'metrics-server.js needs prom-client, an optional dependency of cuda-memory: npm install prom-client\n',
  });
});

test('node examples/llama-beside-service.js without node-llama-cpp (not a dependency) says so in one line and exits 2', () => {
  const r = spawnSync(process.execPath, [path.join(dir, 'llama-beside-service.js')], { cwd: root, env, encoding: 'utf8', timeout: 60000 });
  expect({ status: r.status, stderr: r.stderr }).toEqual({
    status: 2,
    stderr: 'llama-beside-service.js needs node-llama-cpp: npm install node-llama-cpp\n',
  });
});
