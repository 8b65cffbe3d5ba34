'use strict';
// Buffers taken away while the library uses them: transferred (structuredClone, postMessage,
// ArrayBuffer.prototype.transfer) during an asynchronous copy, a registration or a pinned
// buffer's life, or resizable. Each case runs in a child process (test/fixtures/
// detach-during-copy.js), so that a crash shows as a signal instead of taking jest down. Before
// the library held these buffers, the host-to-host cases ended in SIGSEGV.
const path = require('path');
const { spawnSync } = require('child_process');
const { describeGpu } = require('../helpers');

const fixture = path.join(__dirname, '..', 'fixtures', 'detach-during-copy.js');
const nodeMajor = Number(process.versions.node.split('.')[0]);

function run(kind, how, mib) {
  const r = spawnSync(process.execPath, ['--expose-gc', '--allow-natives-syntax', fixture, kind, how, String(mib)], {
    encoding: 'utf8',
    timeout: 120000,
  });
  const line = r.stdout.trim().split('\n').pop() || '{}';
  return { status: r.status, signal: r.signal, stderr: r.stderr, out: JSON.parse(line) };
}

// A transfer list naming a marked buffer: Node 20 and earlier copy it, later versions refuse.
const cloneAttempt = nodeMajor <= 20 ? 'copied' : 'refused DataCloneError';

function expectCopyCase(kind, how, mib) {
  const r = run(kind, how, mib);
  expect({ signal: r.signal, status: r.status, stderr: r.stderr }).toEqual({ signal: null, status: 0, stderr: '' });
  if (how === 'transfer') {
    expect(r.out).toEqual({ attempt: 'refused ERR_BUFFER_IN_USE', intact: true, afterCopy: 'detached' });
  } else {
    expect(r.out).toEqual({ attempt: cloneAttempt, intact: true });
  }
}

describe('a Node buffer taken away during copyAsync (host to host, no GPU)', () => {
  for (const kind of ['h2h-dst', 'h2h-src'])
    for (const how of ['structuredClone', 'postMessage', 'transfer'])
      test(`${kind}, ${how}: no crash, the copy completes, the buffer keeps its memory`, () => {
        expectCopyCase(kind, how, 256);
      });

  test('a resizable ArrayBuffer is refused by copyAsync with ERR_INVALID_ARG_VALUE', () => {
    const r = run('h2h-dst', 'resizable', 1);
    expect(r.status).toBe(0);
    expect(r.out).toEqual({ attempt: 'refused ERR_INVALID_ARG_VALUE' });
  });

  test('transfer() of a buffer the library does not hold works as before', () => {
    const r = spawnSync(
      process.execPath,
      [
        '--allow-natives-syntax',
        '-e',
        `const fake = typeof ArrayBuffer.prototype.transfer !== 'function';
         if (fake) ArrayBuffer.prototype.transfer = new Function('const c = this.slice(0); %ArrayBufferDetach(this); return c;');
         const cm = require(${JSON.stringify(path.join(__dirname, '..', '..'))});
         const a = new Uint8Array(1024); a[5] = 9;
         cm.copyAsync(new Uint8Array(1024), a).then(() => {
           const b = new ArrayBuffer(16);
           const moved = b.transfer();
           const movedA = a.buffer.transfer();
           console.log(JSON.stringify({ b: b.byteLength, moved: moved.byteLength, a: a.byteLength, movedA: new Uint8Array(movedA)[5] }));
         });`,
      ],
      { encoding: 'utf8' },
    );
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({ b: 0, moved: 16, a: 0, movedA: 9 });
  });
});

describeGpu('a Node buffer taken away while the GPU uses it', () => {
  for (const kind of ['h2d', 'd2h', 'staged-h2d', 'staged-d2h'])
    for (const how of ['structuredClone', 'postMessage', 'transfer'])
      test(`copyAsync ${kind}, ${how}: no crash, data intact`, () => {
        expectCopyCase(kind, how, 256);
      });

  for (const how of ['structuredClone', 'postMessage', 'transfer'])
    test(`registerHost, ${how}: the registered memory stays; transfer() works again once unregistered`, () => {
      const r = run('register', how, 64);
      expect({ signal: r.signal, status: r.status }).toEqual({ signal: null, status: 0 });
      expect(r.out).toEqual({
        attempt: how === 'transfer' ? 'refused ERR_BUFFER_IN_USE' : cloneAttempt,
        intact: true,
        afterUnregister: how === 'transfer' ? 'detached' : cloneAttempt,
      });
    });

  for (const how of ['structuredClone', 'postMessage', 'transfer'])
    test(`a PinnedBuffer's bytes, ${how}: the pinned memory stays; free() still empties the view`, () => {
      const r = run('pinned-bytes', how, 64);
      expect({ signal: r.signal, status: r.status }).toEqual({ signal: null, status: 0 });
      expect(r.out).toEqual({
        attempt: how === 'transfer' ? 'refused ERR_BUFFER_IN_USE' : cloneAttempt,
        intact: true,
        emptied: true,
      });
    });

  test('registerHost refuses a resizable ArrayBuffer with ERR_INVALID_ARG_VALUE', () => {
    const r = run('register', 'resizable', 1);
    expect(r.out).toEqual({ attempt: 'refused ERR_INVALID_ARG_VALUE' });
  });
});
