#!/usr/bin/env node
// Prints the CUDA toolkit directory for binding.gyp, or nothing for a build without CUDA.
// Order: CUDA_MEMORY_NO_CUDA (forces none), CUDA_PATH, CUDA_HOME, /usr/local/cuda, nvcc on PATH.
'use strict';
const fs = require('fs');
const path = require('path');

function hasToolkit(dir) {
  return (
    !!dir &&
    fs.existsSync(path.join(dir, 'include', 'cuda_runtime_api.h')) &&
    (fs.existsSync(path.join(dir, 'lib64', 'libcudart_static.a')) || fs.existsSync(path.join(dir, 'lib', 'libcudart_static.a')))
  );
}

function findCuda(env = process.env) {
  if (env.CUDA_MEMORY_NO_CUDA && env.CUDA_MEMORY_NO_CUDA !== '0') return '';
  const candidates = [env.CUDA_PATH, env.CUDA_HOME, '/usr/local/cuda'];
  for (const dir of (env.PATH || '').split(path.delimiter)) {
    if (dir && fs.existsSync(path.join(dir, 'nvcc'))) candidates.push(path.dirname(dir));
  }
  return candidates.find(hasToolkit) || '';
}

function libDir(dir) {
  return fs.existsSync(path.join(dir, 'lib64', 'libcudart_static.a')) ? path.join(dir, 'lib64') : path.join(dir, 'lib');
}

if (require.main === module) {
  const dir = findCuda();
  process.stdout.write(process.argv[2] === '--lib' ? (dir ? libDir(dir) : '') : dir);
}
module.exports = { findCuda, libDir };
