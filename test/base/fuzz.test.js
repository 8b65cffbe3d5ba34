'use strict';
// Every export of the package, every static method of its classes and every method of what it
// makes on simulated devices, called with hostile arguments (wrong types, NaN, ±Infinity, -0,
// huge numbers, bigints, symbols, detached and resizable buffers, frozen objects, proxies that
// throw or are revoked, getters that throw): each call returns, or throws an error with a string
// `code`. The calls run in a child process (test/fixtures/fuzz-exports.js), so that a crash is a
// signal here; the GPU is hidden from it, so that no call with its defaults starts a benchmark.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { cm } = require('../helpers');

const FUZZ = path.join(__dirname, '..', 'fixtures', 'fuzz-exports.js');

describe('every export, fuzzed with hostile arguments', () => {
  test('no call crashes, hangs or throws an error without a code', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-fuzz-')); // where paths such as "x" land
    try {
      const r = spawnSync(process.execPath, [FUZZ], {
        cwd: dir,
        encoding: 'utf8',
        env: { ...process.env, CUDA_VISIBLE_DEVICES: '', CUDA_MEMORY_STAGING_FILE: '' },
        timeout: 300000,
        maxBuffer: 64 * 2 ** 20,
      });
      expect({ signal: r.signal, status: r.status, stderr: r.signal || r.status ? r.stderr.slice(-4000) : '' }).toEqual({
        signal: null,
        status: 0,
        stderr: '',
      });
      const { calls, fuzzed, failures } = JSON.parse(r.stdout);
      // The list comes from the module itself: every function it exports is fuzzed.
      expect(fuzzed).toEqual(Object.keys(cm).filter((k) => typeof cm[k] === 'function'));
      expect(calls).toBeGreaterThan(fuzzed.length * 40);
      expect(failures).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 320000);
});
