#!/usr/bin/env node
// `npm start`: builds what is missing (scripts/build-missing.js), then runs the main job: the
// transfer benchmark (`cuda-memory bench`, with any arguments given after `npm start --`) where
// a GPU is usable; without one, the allocator demo of TensorFlow's memory policies on a simulated
// device (examples/allow-growth.js and examples/memory-fraction.js), saying which it runs and why.
// Exits with the job's exit status.
'use strict';
const path = require('path');
const { spawnSync } = require('child_process');

const root = path.join(__dirname, '..');
const say = (msg) => process.stdout.write(`cuda-memory: ${msg}\n`);
const node = (args) => spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' }).status ?? 1;

if (node([path.join(__dirname, 'build-missing.js')]) !== 0) process.exit(1);

// In a child process: the status as the benchmark will see it, without loading the addon here.
const probe = spawnSync(process.execPath, ['-e', 'process.stdout.write(JSON.stringify(require(".").status()))'], {
  cwd: root,
  encoding: 'utf8',
});
let status;
try {
  status = JSON.parse(probe.stdout);
} catch {
  console.error(`cuda-memory: the package does not load: ${probe.stderr.trim() || `exit ${probe.status}`}`);
  process.exit(1);
}

if (status.available) {
  say('a GPU is usable: running the transfer benchmark (cuda-memory bench)');
  process.exit(node([path.join(root, 'dist', 'cli.js'), 'bench', ...process.argv.slice(2)]));
}
// A binary without CUDA (or none) says nothing about the GPU: the addon is what cannot use one.
const cannot = status.reason === 'NOT_BUILT_WITH_CUDA' || status.reason === 'ADDON_NOT_LOADED';
say(
  `${cannot ? 'the addon in use cannot use a GPU' : 'no usable GPU here'} (${status.reason}: ${status.message}), so not the transfer benchmark: ` +
    "running the allocator demo of TensorFlow's memory policies on a simulated device instead (examples/allow-growth.js, examples/memory-fraction.js)",
);
for (const example of ['allow-growth.js', 'memory-fraction.js']) {
  say(`node examples/${example} --simulate`);
  const code = node([path.join(root, 'examples', example), '--simulate']);
  if (code !== 0) process.exit(code);
}
