'use strict';
// lib/base/files.ts: the one errno-to-code table of the file errors. Node's fs errors (fileError)
// and the addon's (native/transfer/files/failure.cc, given the table at init) take their codes from it,
// so every errno gets the same code on both paths; and fileError needs no addon.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { root, tempDir } = require('../helpers');
const { fileError, fileCodeTable } = require('../../dist/base/files');
const { native } = require('../../dist/binding/native');

// Every errno the table names, with its code, and two it does not (EBUSY: ERR_FILE_IO).
const CODES = [
  ['ENOENT', 'ERR_FILE_NOT_FOUND'],
  ['ENOTDIR', 'ERR_FILE_NOT_FOUND'],
  ['EACCES', 'ERR_FILE_PERMISSION'],
  ['EPERM', 'ERR_FILE_PERMISSION'],
  ['EROFS', 'ERR_FILE_PERMISSION'],
  ['EISDIR', 'ERR_FILE_IS_DIRECTORY'],
  ['ENOSPC', 'ERR_FILE_NO_SPACE'],
  ['EDQUOT', 'ERR_FILE_NO_SPACE'],
  ['EFBIG', 'ERR_FILE_NO_SPACE'],
  ['EBUSY', 'ERR_FILE_IO'],
];

// What Node's fs throws for a failed open with this errno.
function nodeError(name) {
  return Object.assign(new Error(`${name}: failed, open '/x'`), {
    code: name,
    errno: -os.constants.errno[name],
    syscall: 'open',
    path: '/x',
  });
}

describe('the errno-to-code table of the file errors', () => {
  test.each(CODES)('%s is %s for a Node fs error and for the addon', (name, code) => {
    expect(fileError(nodeError(name), '/x')).toMatchObject({ name: 'CudaMemoryError', code, errno: name, syscall: 'open', path: '/x' });
    expect(native.fileErrnoError(os.constants.errno[name], 'open', '/x')).toMatchObject({
      name: 'CudaMemoryError',
      code,
      syscall: 'open',
      path: '/x',
    });
  });

  test('an errno no platform names is ERR_FILE_IO on both paths', () => {
    expect(fileError(Object.assign(new Error('unknown'), { code: 'UNKNOWN' }), '/x').code).toBe('ERR_FILE_IO');
    const e = native.fileErrnoError(4000, 'read', '/x');
    expect(e).toMatchObject({ code: 'ERR_FILE_IO', errno: 'EUNKNOWN', syscall: 'read' });
  });

  test('errors provoked for real: a missing file and a path through a file get the same code from fs and readFile', () => {
    const dir = tempDir('cm-errno-');
    const file = path.join(dir, 'file');
    fs.writeFileSync(file, 'x');
    for (const [p, name, code] of [
      [path.join(dir, 'missing'), 'ENOENT', 'ERR_FILE_NOT_FOUND'],
      [path.join(file, 'below'), 'ENOTDIR', 'ERR_FILE_NOT_FOUND'],
    ]) {
      let viaNode;
      try {
        fs.openSync(p, 'r');
      } catch (e) {
        viaNode = fileError(e, p);
      }
      let viaAddon;
      try {
        native.fileRead(p, new Uint8Array(8), 0, 0, -1, 0);
      } catch (e) {
        viaAddon = e;
      }
      expect([viaNode.code, viaNode.errno]).toEqual([code, name]);
      expect([viaAddon.code, viaAddon.errno]).toEqual([code, name]);
    }
  });

  test("the addon is given every entry, keyed by this platform's errno values", () => {
    const table = fileCodeTable();
    expect(table.otherwise).toBe('ERR_FILE_IO');
    expect(table.byErrno).toEqual(
      CODES.filter(([, code]) => code !== 'ERR_FILE_IO').map(([name, code]) => [os.constants.errno[name], code]),
    );
  });

  test('without the addon, fileError still codes (readSafetensorsHeader of a missing file)', () => {
    const r = spawnSync(
      process.execPath,
      [
        '-e',
        "const cm = require('.'); try { cm.readSafetensorsHeader('/nonexistent/x'); } catch (e) { console.log(cm.status().reason, e.code); }",
      ],
      { cwd: root, encoding: 'utf8', env: { ...process.env, CUDA_MEMORY_ADDON: '/nonexistent/cuda_memory.node' } },
    );
    expect(r.stdout.trim()).toBe('ADDON_NOT_LOADED ERR_FILE_NOT_FOUND');
  });
});
