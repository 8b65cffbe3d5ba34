'use strict';
// readFile/writeFile: host destinations and every error need no GPU; device memory, pinned
// memory and allocator blocks run under describeGpu.
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { cm, describeGpu, randomBytes, same, inPrivateMounts, privateMountsWork, tempDir } = require('../helpers');

const KiB = 1024;
const MiB = 1024 * KiB;

function tmpDir() {
  return tempDir('cm-files-');
}

function fileWith(dir, name, bytes) {
  const p = path.join(dir, name);
  fs.writeFileSync(p, bytes);
  return p;
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

describe('readFile into host memory', () => {
  const dir = tmpDir();
  const data = randomBytes(5 * MiB + 4321, 7);
  const file = fileWith(dir, 'data.bin', data);
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('the whole file, a range of it, at an offset in the destination; nothing outside the range is written', () => {
    const all = new Uint8Array(data.length);
    expect(cm.readFile(file, all)).toMatchObject({ bytes: data.length });
    expect(same(all, data)).toBe(true);
    for (const [fileOffset, byteLength, dstOffset] of [
      [0, 1, 0],
      [4095, 4097, 3],
      [12345, 3 * MiB + 17, 101],
      [data.length - 10, 10, 0],
      [data.length, 0, 0],
    ]) {
      const dst = new Uint8Array(byteLength + dstOffset + 64).fill(0xab);
      const r = cm.readFile(file, dst, { fileOffset, byteLength, dstOffset });
      expect(r.bytes).toBe(byteLength);
      expect(same(dst.subarray(dstOffset, dstOffset + byteLength), data.subarray(fileOffset, fileOffset + byteLength))).toBe(true);
      expect(dst.subarray(0, dstOffset).every((b) => b === 0xab)).toBe(true);
      expect(dst.subarray(dstOffset + byteLength).every((b) => b === 0xab)).toBe(true);
    }
  });

  test('direct: true reads through O_DIRECT where the file system allows it, unaligned head and tail included', () => {
    const dst = new Uint8Array(3 * MiB + 5);
    let r;
    try {
      r = cm.readFile(file, dst, { fileOffset: 777, byteLength: dst.length, direct: true });
    } catch (e) {
      // tmpfs and some overlay file systems refuse O_DIRECT.
      expect(e).toMatchObject({ code: 'ERR_FILE_IO', errno: 'EINVAL' });
      return;
    }
    expect(r).toMatchObject({ bytes: dst.length, direct: true, directReason: 'asked for' });
    expect(same(dst, data.subarray(777, 777 + dst.length))).toBe(true);
  });

  // /proc unmounted in a private mount namespace (root only): the O_DIRECT reopen goes through the
  // path, checked to be the same file.
  const noProc = privateMountsWork('umount -l /proc && test ! -e /proc/self');
  (noProc ? test : test.skip)(
    `direct: true with /proc not mounted reads the file${noProc ? '' : ' — skipped: needs unshare -m and umount, as root'}`,
    () => {
      const script = `
      const cm = require(${JSON.stringify(require('../helpers').root)});
      const dst = new Uint8Array(${data.length});
      let out;
      try { out = cm.readFile(${JSON.stringify(file)}, dst, { direct: true }); } catch (e) { out = { code: e.code, message: e.message }; }
      const same = Buffer.from(dst).equals(require('fs').readFileSync(${JSON.stringify(file)}));
      process.stdout.write(JSON.stringify({ out, same }));`;
      const r = JSON.parse(
        inPrivateMounts(`umount -l /proc && exec "${process.execPath}" -e '${script.replace(/'/g, "'\\''")}'`, {
          encoding: 'utf8',
          timeout: 60000,
        }),
      );
      // tmpfs and some overlay file systems refuse O_DIRECT: then that, not a missing file.
      if (r.out.code) expect(r.out).toMatchObject({ code: 'ERR_FILE_IO', message: expect.stringContaining('EINVAL') });
      else expect(r).toEqual({ out: expect.objectContaining({ bytes: data.length, direct: true }), same: true });
    },
  );

  test('direct: false and small reads do not use O_DIRECT, and say why', () => {
    expect(cm.readFile(file, new Uint8Array(100), { byteLength: 100, direct: false })).toEqual({
      bytes: 100,
      direct: false,
      directReason: 'asked for',
    });
    expect(cm.readFile(file, new Uint8Array(100), { byteLength: 100 }).directReason).toBe('a small read');
  });

  test('coded errors: missing file, a directory, a FIFO, no permission, a range past the end, a file larger than the destination', () => {
    const dst = new Uint8Array(data.length);
    expect(() => cm.readFile(path.join(dir, 'missing'), dst)).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_NOT_FOUND', syscall: 'open', errno: 'ENOENT' }),
    );
    expect(() => cm.readFile(dir, dst)).toThrow(expect.objectContaining({ code: 'ERR_FILE_IS_DIRECTORY', path: dir }));
    const fifo = path.join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    // Opening a FIFO for reading would wait for a writer; it is refused at once instead.
    expect(() => cm.readFile(fifo, dst)).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_NOT_REGULAR', message: expect.stringContaining('a FIFO') }),
    );
    expect(() => cm.readFile(file, dst, { fileOffset: 1, byteLength: data.length })).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_SHORT', message: expect.stringContaining(`runs past the end`) }),
    );
    expect(() => cm.readFile(file, dst, { fileOffset: data.length + 1 })).toThrow(expect.objectContaining({ code: 'ERR_FILE_SHORT' }));
    const small = new Uint8Array(100).fill(7);
    expect(() => cm.readFile(file, small)).toThrow(expect.objectContaining({ code: 'ERR_FILE_TOO_LARGE' }));
    expect(small.every((b) => b === 7)).toBe(true);
    expect(() => cm.readFile(file, dst, { dstOffset: 1 })).toThrow(expect.objectContaining({ code: 'ERR_FILE_TOO_LARGE' }));
    const e = (() => {
      try {
        cm.readFile(path.join(dir, 'missing'), dst);
      } catch (err) {
        return err;
      }
    })();
    expect(e).toBeInstanceOf(cm.CudaMemoryError);
  });

  test('an errno without a code of its own is ERR_FILE_IO with its name: a Unix socket cannot be opened (ENXIO)', async () => {
    const net = require('net');
    // A short path of its own: a Unix socket's path is limited to about 107 bytes.
    const sockDir = fs.mkdtempSync('/tmp/cm-sock-');
    const sock = path.join(sockDir, 's');
    const server = net.createServer();
    await new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(sock, resolve);
    });
    try {
      expect(() => cm.readFile(sock, new Uint8Array(10))).toThrow(
        expect.objectContaining({ code: 'ERR_FILE_IO', syscall: 'open', errno: 'ENXIO', message: expect.stringContaining('(ENXIO)') }),
      );
    } finally {
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(sockDir, { recursive: true, force: true });
    }
  });

  (isRoot ? test.skip : test)(
    `no permission: ERR_FILE_PERMISSION${isRoot ? ' — skipped: running as root, who may read anything' : ''}`,
    () => {
      const p = fileWith(dir, 'secret', data.subarray(0, 10));
      fs.chmodSync(p, 0o000);
      expect(() => cm.readFile(p, new Uint8Array(10))).toThrow(expect.objectContaining({ code: 'ERR_FILE_PERMISSION', errno: 'EACCES' }));
    },
  );

  test('arguments are checked before any file is opened', () => {
    const dst = new Uint8Array(10);
    expect(() => cm.readFile(file, dst, { byteLength: 11 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => cm.readFile(file, dst, { dstOffset: 11 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => cm.readFile(file, dst, { dstOffset: 5, byteLength: 6 })).toThrow(
      expect.objectContaining({ code: 'ERR_OUT_OF_RANGE', message: 'dstOffset + byteLength (5 + 6) runs past the end of dst (10 bytes)' }),
    );
    expect(() => cm.readFile(file, dst, { fileOffset: -1 })).toThrow(RangeError);
    expect(() => cm.readFile(file, dst, { direct: 'yes' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => cm.readFile(42, dst)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => cm.readFile('', dst)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => cm.readFile(file, 'nope')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => cm.readFile(new URL('http://example.com/x'), dst)).toThrow(TypeError);
    expect(cm.readFile(new URL(`file://${file}`), dst, { byteLength: 10 }).bytes).toBe(10);
  });

  test('readFileAsync runs off the event loop, reports progress up to the total, and rejects with the caller in the stack', async () => {
    const dst = new Uint8Array(data.length);
    const seen = [];
    const r = await cm.readFileAsync(file, dst, { onProgress: (done, total) => seen.push([done, total]), progressInterval: 1 });
    expect(r.bytes).toBe(data.length);
    expect(same(dst, data)).toBe(true);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen[seen.length - 1]).toEqual([data.length, data.length]);
    for (let i = 1; i < seen.length; i++) expect(seen[i][0]).toBeGreaterThanOrEqual(seen[i - 1][0]);
    const err = await cm.readFileAsync(path.join(dir, 'missing'), dst).catch((e) => e);
    expect(err).toMatchObject({ code: 'ERR_FILE_NOT_FOUND' });
    expect(err.stack).toContain('readFileAsync called from');
    await expect(cm.readFileAsync(file, dst, { onProgress: 5 })).rejects.toMatchObject({ code: 'ERR_INVALID_ARG_TYPE' });
  });

  test('once a read settles, the Node buffer is as if the library never saw it: it transfers and clones', async () => {
    const dst = new Uint8Array(data.length);
    await cm.readFileAsync(file, dst);
    expect(same(dst, data)).toBe(true);
    const clone = structuredClone(dst.buffer, { transfer: [dst.buffer] });
    expect(dst.byteLength).toBe(0);
    expect(same(new Uint8Array(clone), data)).toBe(true);
  });

  test('readFileStorage reads with no destination; fileCache reports and drops the page cache', () => {
    const r = cm.readFileStorage(file);
    expect(r.bytes).toBe(data.length);
    expect(r.seconds).toBeGreaterThan(0);
    expect(cm.readFileStorage(file, { fileOffset: 10, byteLength: 100 }).bytes).toBe(100);
    expect(() => cm.readFileStorage(file, { fileOffset: 10, byteLength: data.length })).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_SHORT' }),
    );
    const c = cm.fileCache(file, true);
    expect(typeof c.dropped).toBe('boolean');
    expect(c.resident).toBeGreaterThanOrEqual(-1);
    expect(c.resident).toBeLessThanOrEqual(1);
    expect(Array.isArray(cm.fileDirectChoices())).toBe(true);
  });
});

describe('{ take: true } for readFileAsync and writeFileAsync', () => {
  const dir = tmpDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const data = randomBytes(3 * MiB + 11, 31);
  const file = fileWith(dir, 'take.bin', data);

  test('a read takes the destination at the call and hands it back as taken, with the data', async () => {
    const dst = new Uint8Array(data.length);
    const reading = cm.readFileAsync(file, dst, { take: true });
    // Taken: nothing the caller holds reaches the memory while the read runs.
    expect(dst.byteLength).toBe(0);
    expect(dst.buffer.byteLength).toBe(0);
    const r = await reading;
    expect(r).toMatchObject({ bytes: data.length, direct: expect.any(Boolean) });
    expect(r.taken).toBeInstanceOf(Uint8Array);
    expect(same(r.taken, data)).toBe(true);
    // The kind is kept: a Buffer comes back as a Buffer, an ArrayBuffer as an ArrayBuffer.
    const ab = new ArrayBuffer(100);
    const back = await cm.readFileAsync(file, ab, { take: true, byteLength: 100 });
    expect(ab.byteLength).toBe(0);
    expect(back.taken).toBeInstanceOf(ArrayBuffer);
    expect(same(new Uint8Array(back.taken), data.subarray(0, 100))).toBe(true);
    const buf = Buffer.from(new ArrayBuffer(50));
    expect(Buffer.isBuffer((await cm.readFileAsync(file, buf, { take: true, byteLength: 50 })).taken)).toBe(true);
  });

  test('a write takes the source and hands it back with the bytes written', async () => {
    const src = new Uint8Array(data);
    const out = path.join(dir, 'out.bin');
    const writing = cm.writeFileAsync(out, src, { take: true });
    expect(src.byteLength).toBe(0);
    const w = await writing;
    expect(w.bytes).toBe(data.length);
    expect(same(w.taken, data)).toBe(true);
    expect(same(fs.readFileSync(out), data)).toBe(true);
  });

  test('a failure carries taken; a view of part of a buffer, or take not a boolean, is refused before anything is taken', async () => {
    const dst = new Uint8Array(16);
    const e = await cm.readFileAsync(path.join(dir, 'missing'), dst, { take: true }).catch((x) => x);
    expect(e).toMatchObject({ code: 'ERR_FILE_NOT_FOUND' });
    expect(e.taken).toBeInstanceOf(Uint8Array);
    expect(e.taken.byteLength).toBe(16);
    const whole = new Uint8Array(64);
    const part = whole.subarray(8, 16);
    await expect(cm.readFileAsync(file, part, { take: true })).rejects.toMatchObject({ code: 'ERR_INVALID_ARG_VALUE' });
    expect(whole.byteLength).toBe(64);
    await expect(cm.writeFileAsync(path.join(dir, 'x'), whole, { take: 1 })).rejects.toMatchObject({ code: 'ERR_INVALID_ARG_TYPE' });
    expect(whole.byteLength).toBe(64);
  });
});

describe('fileCache on large files', () => {
  test('a sparse file of 8 TiB is measured in bounded time and memory (in a child process with a time limit)', () => {
    const dir = tmpDir();
    try {
      const p = path.join(dir, 'sparse.bin');
      const fd = fs.openSync(p, 'w');
      try {
        fs.ftruncateSync(fd, 8 * 2 ** 40);
      } catch (e) {
        // A file system without files this large (ext4 with small blocks, tmpfs limits).
        expect(e.code).toMatch(/EFBIG|EINVAL/);
        return;
      } finally {
        fs.closeSync(fd);
      }
      // A cached part at the start: estimates see it in proportion, not as the whole file.
      fs.writeFileSync(p, Buffer.alloc(MiB, 1), { flag: 'r+' });
      const script = `
        const cm = require(${JSON.stringify(require('../helpers').root)});
        const t0 = Date.now();
        const c = cm.fileCache(${JSON.stringify(p)});
        process.stdout.write(JSON.stringify({ c, ms: Date.now() - t0, rss: process.memoryUsage().rss }));`;
      const r = JSON.parse(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30000 }));
      expect(r.c.resident).toBeGreaterThanOrEqual(0);
      expect(r.c.resident).toBeLessThan(0.01);
      expect(r.rss).toBeLessThan(256 * MiB);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a file of a few MiB is measured whole: exactly what is cached', () => {
    const dir = tmpDir();
    try {
      const p = fileWith(dir, 'small.bin', randomBytes(8 * MiB, 3));
      expect(cm.fileCache(p).resident).toBe(1);
      const c = cm.fileCache(p, true);
      if (c.dropped) expect(c.resident).toBeLessThan(1);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('writeFile from host memory', () => {
  const dir = tmpDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('writes the bytes asked for, replaces an existing file, and leaves no temporary file', () => {
    const data = randomBytes(9 * MiB + 3, 8);
    const p = path.join(dir, 'out.bin');
    fs.writeFileSync(p, 'old contents, longer than nothing');
    expect(cm.writeFile(p, data, { srcOffset: 3, byteLength: 9 * MiB, fsync: true })).toBe(9 * MiB);
    expect(same(fs.readFileSync(p), data.subarray(3, 3 + 9 * MiB))).toBe(true);
    expect(fs.readdirSync(dir)).toEqual(['out.bin']);
    expect(cm.writeFile(p, new Uint8Array(0))).toBe(0);
    expect(fs.statSync(p).size).toBe(0);
  });

  test('mode sets the permission bits of the new file (before the umask)', () => {
    const p = path.join(dir, 'mode.bin');
    cm.writeFile(p, new Uint8Array(4), { mode: 0o600 });
    expect(fs.statSync(p).mode & 0o777).toBe(0o600 & ~process.umask());
  });

  test('a failed write leaves neither a file nor a temporary one behind', () => {
    const sub = path.join(dir, 'sub');
    fs.mkdirSync(sub);
    expect(() => cm.writeFile(sub, new Uint8Array(4))).toThrow(expect.objectContaining({ code: 'ERR_FILE_IS_DIRECTORY' }));
    expect(() => cm.writeFile(path.join(dir, 'no-such-dir', 'x'), new Uint8Array(4))).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_NOT_FOUND' }),
    );
    const fifo = path.join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    expect(() => cm.writeFile(fifo, new Uint8Array(4))).toThrow(expect.objectContaining({ code: 'ERR_FILE_NOT_REGULAR' }));
    expect(fs.readdirSync(dir).sort()).toEqual(['fifo', 'mode.bin', 'out.bin', 'sub']);
    expect(fs.readdirSync(sub)).toEqual([]);
  });

  (isRoot ? test.skip : test)(
    `a folder without write permission: ERR_FILE_PERMISSION, nothing written${isRoot ? ' — skipped: running as root, who may write anywhere' : ''}`,
    () => {
      const ro = path.join(dir, 'ro');
      fs.mkdirSync(ro, 0o500);
      expect(() => cm.writeFile(path.join(ro, 'x'), new Uint8Array(4))).toThrow(expect.objectContaining({ code: 'ERR_FILE_PERMISSION' }));
      expect(fs.readdirSync(ro)).toEqual([]);
    },
  );

  test('writeFileAsync with progress; arguments checked like copy()', async () => {
    const data = randomBytes(20 * MiB + 1, 9);
    const p = path.join(dir, 'async.bin');
    const seen = [];
    expect(await cm.writeFileAsync(p, data, { onProgress: (d, t) => seen.push([d, t]), progressInterval: 1 })).toBe(data.length);
    expect(same(fs.readFileSync(p), data)).toBe(true);
    expect(seen[seen.length - 1]).toEqual([data.length, data.length]);
    expect(() => cm.writeFile(p, data, { srcOffset: 2, byteLength: data.length })).toThrow(
      expect.objectContaining({
        code: 'ERR_OUT_OF_RANGE',
        message: `srcOffset + byteLength (2 + ${data.length}) runs past the end of src (${data.length} bytes)`,
      }),
    );
    expect(() => cm.writeFile(p, data, { mode: 0o10000 })).toThrow(RangeError);
    expect(() => cm.writeFile(p, data, { fsync: 1 })).toThrow(TypeError);
    await expect(cm.writeFileAsync(path.join(dir, 'nope', 'x'), data)).rejects.toMatchObject({ code: 'ERR_FILE_NOT_FOUND' });
  });
});

describe('replacing a file: what is refused, and what the new file keeps', () => {
  const dir = tmpDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const data = randomBytes(4096 + 7, 21);
  // Every writer that replaces a file, with the bytes each writes for `data`.
  const writers = {
    writeFile: (p) => cm.writeFile(p, data),
    writeFileAsync: (p) => cm.writeFileAsync(p, data),
    saveSafetensors: (p) => cm.saveSafetensors(p, { x: { dtype: 'U8', shape: [data.length], buffer: data } }),
    saveSafetensorsAsync: (p) => cm.saveSafetensorsAsync(p, { x: { dtype: 'U8', shape: [data.length], buffer: data } }),
  };
  const wrote = (p) => {
    const f = fs.readFileSync(p);
    return f.length >= data.length && same(f.subarray(f.length - data.length), data);
  };
  let mknod = false;
  try {
    execFileSync('mknod', [path.join(dir, 'probe'), 'c', '1', '3'], { stdio: 'ignore' });
    fs.rmSync(path.join(dir, 'probe'));
    mknod = true;
  } catch {
    // not root, or no CAP_MKNOD: the device case is left out
  }

  for (const [name, write] of Object.entries(writers)) {
    test(`${name}: a FIFO, a device or a folder is refused with its code and left as it was`, async () => {
      const sub = path.join(dir, `${name}-dir`);
      fs.mkdirSync(sub);
      const fifo = path.join(dir, `${name}-fifo`);
      execFileSync('mkfifo', [fifo]);
      const targets = [
        [fifo, 'ERR_FILE_NOT_REGULAR', (st) => st.isFIFO()],
        [sub, 'ERR_FILE_IS_DIRECTORY', (st) => st.isDirectory()],
      ];
      if (mknod) {
        const dev = path.join(dir, `${name}-dev`);
        execFileSync('mknod', [dev, 'c', '1', '3']);
        targets.push([dev, 'ERR_FILE_NOT_REGULAR', (st) => st.isCharacterDevice()]);
      }
      for (const [p, code, kind] of targets) {
        await expect((async () => write(p))()).rejects.toMatchObject({ code });
        expect(kind(fs.lstatSync(p))).toBe(true);
        // A link to it is followed to it, and refused the same way.
        const link = `${p}-link`;
        fs.symlinkSync(p, link);
        await expect((async () => write(link))()).rejects.toMatchObject({ code });
        expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
      }
      expect(fs.readdirSync(dir).filter((f) => f.includes('.tmp-'))).toEqual([]);
    });

    test(`${name}: a replaced file keeps its mode (and owner, where permitted); a symlink is written through to its target`, async () => {
      const p = path.join(dir, `${name}-private`);
      fs.writeFileSync(p, 'old', { mode: 0o600 });
      fs.chmodSync(p, 0o640);
      if (isRoot) fs.chownSync(p, 12345, 23456);
      await write(p);
      expect(wrote(p)).toBe(true);
      const st = fs.statSync(p);
      expect(st.mode & 0o7777).toBe(0o640);
      if (isRoot) expect([st.uid, st.gid]).toEqual([12345, 23456]);
      const target = path.join(dir, `${name}-target`);
      fs.writeFileSync(target, 'old', { mode: 0o600 });
      fs.chmodSync(target, 0o600);
      const link = path.join(dir, `${name}-link`);
      fs.symlinkSync(path.basename(target), link);
      await write(link);
      expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
      expect(fs.readlinkSync(link)).toBe(path.basename(target));
      expect(wrote(target)).toBe(true);
      expect(fs.statSync(target).mode & 0o7777).toBe(0o600);
      // A dangling link: its target is created, as fs.writeFile does.
      const dangling = path.join(dir, `${name}-dangling`);
      fs.symlinkSync(`${name}-new`, dangling);
      await write(dangling);
      expect(fs.lstatSync(dangling).isSymbolicLink()).toBe(true);
      expect(wrote(path.join(dir, `${name}-new`))).toBe(true);
      expect(fs.readdirSync(dir).filter((f) => f.includes('.tmp-'))).toEqual([]);
    });
  }

  test('writes at a fileOffset refuse a symbolic link instead of following it', () => {
    const target = path.join(dir, 'in-place-target');
    fs.writeFileSync(target, 'abcdef');
    const link = path.join(dir, 'in-place-link');
    fs.symlinkSync(target, link);
    expect(() => cm.writeFile(link, new Uint8Array([1, 2]), { fileOffset: 1 })).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_NOT_REGULAR', message: expect.stringContaining('symbolic link') }),
    );
    expect(fs.readFileSync(target, 'utf8')).toBe('abcdef');
    expect(cm.writeFile(target, new Uint8Array([0x41, 0x42]), { fileOffset: 1 })).toBe(2);
    expect(fs.readFileSync(target, 'utf8')).toBe('aABdef');
  });
});

describeGpu('readFile/writeFile with managed memory', () => {
  const dir = tmpDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('into and from a ManagedBuffer; where the host must wait for the device, bytes refuses while a file transfer runs', async () => {
    const data = randomBytes(12 * MiB + 5, 41);
    const file = fileWith(dir, 'managed.bin', data);
    const saved = process.env.CUDA_MEMORY_MANAGED_CONCURRENT;
    process.env.CUDA_MEMORY_MANAGED_CONCURRENT = '0';
    let m;
    try {
      m = cm.ManagedBuffer.alloc(data.length);
    } finally {
      if (saved === undefined) delete process.env.CUDA_MEMORY_MANAGED_CONCURRENT;
      else process.env.CUDA_MEMORY_MANAGED_CONCURRENT = saved;
    }
    try {
      expect(m.concurrentAccess).toBe(false);
      expect(cm.readFile(file, m).bytes).toBe(data.length);
      expect(same(m.bytes, data)).toBe(true);
      m.bytes.fill(0);
      const reading = cm.readFileAsync(file, m);
      expect(() => m.bytes).toThrow(expect.objectContaining({ code: 'ERR_MANAGED_BUSY' }));
      await reading;
      expect(same(m.bytes, data)).toBe(true);
      const out = path.join(dir, 'managed-out.bin');
      const writing = cm.writeFileAsync(out, m);
      expect(() => m.bytes).toThrow(/readFileAsync or writeFileAsync/);
      expect(await writing).toBe(data.length);
      expect(same(fs.readFileSync(out), data)).toBe(true);
      expect(cm.writeFile(out, m, { byteLength: 100 })).toBe(100);
      expect(same(fs.readFileSync(out), data.subarray(0, 100))).toBe(true);
      // A failed transfer releases the buffer too.
      await expect(cm.readFileAsync(path.join(dir, 'missing'), m)).rejects.toMatchObject({ code: 'ERR_FILE_NOT_FOUND' });
      expect(m.bytes.length).toBe(data.length);
    } finally {
      m.free();
    }
  });
});

describeGpu('readFile/writeFile with device memory', () => {
  const dir = tmpDir();
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const data = randomBytes(21 * MiB + 4321, 11);
  const file = fileWith(dir, 'dev.bin', data);

  function deviceBytes(buf) {
    const out = new Uint8Array(buf.byteLength);
    cm.copy(out, buf);
    return out;
  }

  test('into a DeviceBuffer: whole, and a range at an offset, buffered and O_DIRECT, nothing outside the range written', () => {
    const dev = cm.DeviceBuffer.alloc(data.length + 8192);
    try {
      for (const direct of [false, true, 'auto']) {
        cm.memset(dev, 0xab);
        let r;
        try {
          r = cm.readFile(file, dev, { fileOffset: 777, byteLength: data.length - 1000, dstOffset: 4099, direct });
        } catch (e) {
          if (direct === true && e.code === 'ERR_FILE_IO' && e.errno === 'EINVAL') continue; // no O_DIRECT here
          throw e;
        }
        expect(r.bytes).toBe(data.length - 1000);
        const back = deviceBytes(dev);
        expect(same(back.subarray(4099, 4099 + data.length - 1000), data.subarray(777, data.length - 223))).toBe(true);
        expect(back.subarray(0, 4099).every((b) => b === 0xab)).toBe(true);
        expect(back.subarray(4099 + data.length - 1000).every((b) => b === 0xab)).toBe(true);
      }
      expect(() => cm.readFile(file, dev, { dstOffset: 8193 })).toThrow(expect.objectContaining({ code: 'ERR_FILE_TOO_LARGE' }));
    } finally {
      dev.free();
    }
  });

  test('from a DeviceBuffer to a file and back, sync and async with progress', async () => {
    const dev = cm.DeviceBuffer.alloc(data.length);
    try {
      cm.copy(dev, data);
      const out = path.join(dir, 'from-device.bin');
      expect(cm.writeFile(out, dev, { fsync: true })).toBe(data.length);
      expect(same(fs.readFileSync(out), data)).toBe(true);
      const out2 = path.join(dir, 'from-device-async.bin');
      const seen = [];
      await cm.writeFileAsync(out2, dev, { srcOffset: 5, onProgress: (d) => seen.push(d), progressInterval: 1 });
      expect(same(fs.readFileSync(out2), data.subarray(5))).toBe(true);
      expect(seen[seen.length - 1]).toBe(data.length - 5);
      const dev2 = cm.DeviceBuffer.alloc(data.length);
      try {
        const r = await cm.readFileAsync(out, dev2, { onProgress: (d) => seen.push(d) });
        expect(r.bytes).toBe(data.length);
        expect(same(deviceBytes(dev2), data)).toBe(true);
      } finally {
        dev2.free();
      }
    } finally {
      dev.free();
    }
  });

  test('a free() during readFileAsync waits for the read to settle', async () => {
    const dev = cm.DeviceBuffer.alloc(data.length);
    const pending = cm.readFileAsync(file, dev);
    dev.free();
    await expect(pending).resolves.toMatchObject({ bytes: data.length });
  });

  test('into pinned memory and an allocator block', () => {
    const pinned = cm.PinnedBuffer.alloc(data.length);
    try {
      cm.readFile(file, pinned);
      expect(same(pinned.bytes.subarray(0, data.length), data)).toBe(true);
      const out = path.join(dir, 'from-pinned.bin');
      cm.writeFile(out, pinned, { byteLength: 1000 });
      expect(same(fs.readFileSync(out), data.subarray(0, 1000))).toBe(true);
    } finally {
      pinned.free();
    }
    const a = cm.createAllocator({ memoryLimit: 64 * MiB });
    try {
      const block = a.alloc(data.length);
      cm.readFile(file, block, { fileOffset: 100, byteLength: data.length - 100 });
      expect(same(deviceBytes(block).subarray(0, data.length - 100), data.subarray(100))).toBe(true);
      block.free();
    } finally {
      a.close();
    }
  });
});
