'use strict';
// safetensors: the header checks (hostile headers, hand-made and fuzzed), the loader and writer
// on host memory, a file from the reference implementation, and device memory under describeGpu.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { cm, describeGpu, randomBytes, rng, same } = require('../helpers');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-safetensors-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

// A file from a header object (or raw header text) and a data section of `dataBytes` bytes.
function fileOf(header, dataBytes = 0, lengthOverride) {
  const body = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header));
  const out = Buffer.alloc(8 + body.length + dataBytes);
  out.writeBigUInt64LE(lengthOverride ?? BigInt(body.length), 0);
  body.copy(out, 8);
  return out;
}

const parse = (bytes, size = bytes.length, max) => cm.parseSafetensorsHeader(bytes, size, max);
const invalid = (message) => expect.objectContaining({ code: 'ERR_SAFETENSORS_INVALID', message: expect.stringMatching(message) });

describe('safetensors header checks', () => {
  test('a valid header: absolute offsets, sorted by place, metadata', () => {
    const h = parse(
      fileOf(
        {
          __metadata__: { format: 'pt' },
          b: { dtype: 'F16', shape: [2, 2], data_offsets: [8, 16] },
          a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
          empty: { dtype: 'I64', shape: [0, 5], data_offsets: [16, 16] },
        },
        16,
      ),
    );
    const base = h.dataOffset;
    expect(h.metadata).toEqual({ format: 'pt' });
    expect(h.tensors).toEqual([
      { name: 'a', dtype: 'F32', shape: [2], begin: base, end: base + 8 },
      { name: 'b', dtype: 'F16', shape: [2, 2], begin: base + 8, end: base + 16 },
      { name: 'empty', dtype: 'I64', shape: [0, 5], begin: base + 16, end: base + 16 },
    ]);
  });

  test('hostile headers are refused with a reason, before anything is allocated', () => {
    const t = (dtype, shape, data_offsets) => ({ x: { dtype, shape, data_offsets } });
    expect(() => parse(Buffer.alloc(5))).toThrow(invalid(/fewer than the 8/));
    expect(() => parse(fileOf({}, 0, 1000n))).toThrow(invalid(/runs past the end of the file/));
    expect(() => parse(fileOf({}, 0, 2n ** 64n - 1n))).toThrow(invalid(/above the limit/));
    expect(() => parse(fileOf({}, 0, 2n ** 53n + 1n))).toThrow(invalid(/above the limit/));
    expect(() => parse(fileOf({ x: 1 }), undefined, 4)).toThrow(invalid(/above the limit of 4/));
    expect(() => parse(fileOf({}, 0, 1n))).toThrow(invalid(/too short/));
    expect(() => parse(Buffer.concat([fileOf('{"a":"'), Buffer.from([0xff, 0xfe])]), 8 + 8)).toThrow();
    const bad = fileOf('{"a":"xx"}');
    bad[14] = 0xff;
    expect(() => parse(bad)).toThrow(invalid(/not UTF-8/));
    expect(() => parse(fileOf('[1, 2]'))).toThrow(invalid(/does not start with/));
    expect(() => parse(fileOf('{"a": '))).toThrow(invalid(/not JSON/));
    expect(() => parse(fileOf('{"a":' + '['.repeat(200000) + ']'.repeat(200000) + '}'))).toThrow(invalid(/./));
    expect(() => parse(fileOf({ x: [] }))).toThrow(invalid(/is not an object/));
    expect(() => parse(fileOf(t('F33', [1], [0, 4]), 4))).toThrow(invalid(/dtype the string "F33"/));
    expect(() => parse(fileOf(t('F32', [-1], [0, 4]), 4))).toThrow(invalid(/shape/));
    expect(() => parse(fileOf(t('F32', [1.5], [0, 4]), 4))).toThrow(invalid(/shape/));
    expect(() => parse(fileOf(t('F32', '4', [0, 4]), 4))).toThrow(invalid(/shape/));
    expect(() => parse(fileOf(t('F32', [1], [0]), 4))).toThrow(invalid(/data_offsets/));
    expect(() => parse(fileOf(t('F32', [1], [0, 4, 8]), 8))).toThrow(invalid(/data_offsets/));
    expect(() => parse(fileOf(t('F32', [1], [-4, 0]), 4))).toThrow(invalid(/data_offsets/));
    expect(() => parse(fileOf(t('F32', [1], [0, 2 ** 60]), 4))).toThrow(invalid(/data_offsets/));
    expect(() => parse(fileOf(t('F32', [1], [4, 0]), 4))).toThrow(invalid(/end before they begin/));
    expect(() => parse(fileOf(t('F32', [1], [4, 8]), 4))).toThrow(invalid(/past the end of the data section \(4 bytes\)/));
    expect(() => parse(fileOf(t('F32', [2], [0, 4]), 4))).toThrow(invalid(/8 bytes, but data_offsets \[0, 4\] hold 4/));
    // A shape whose product overflows a double (and 64 bits) still compares exactly.
    expect(() => parse(fileOf(t('U8', [2 ** 52, 2 ** 52, 2 ** 52, 0 + 16], [0, 0]), 0))).toThrow(invalid(/bytes, but data_offsets/));
    expect(() => parse(fileOf(t('U8', [4294967296, 4294967296], [0, 0]), 0))).toThrow(invalid(/18446744073709551616 bytes/));
    expect(() =>
      parse(
        fileOf(
          {
            a: { dtype: 'U8', shape: [8], data_offsets: [0, 8] },
            b: { dtype: 'U8', shape: [4], data_offsets: [4, 8] },
          },
          8,
        ),
      ),
    ).toThrow(invalid(/"a" and "b" overlap/));
    expect(() => parse(fileOf({ x: { dtype: 'U8', shape: [1], data_offsets: [0, 1], extra: 1 } }, 1))).toThrow(
      invalid(/unknown field "extra"/),
    );
    expect(() => parse(fileOf({ __metadata__: { a: 1 } }))).toThrow(invalid(/__metadata__\["a"\] is number 1/));
    expect(() => parse(fileOf({ __metadata__: [] }))).toThrow(invalid(/__metadata__ is not an object/));
    expect(() => parse(fileOf({ '': { dtype: 'U8', shape: [0], data_offsets: [0, 0] } }))).toThrow(invalid(/empty name/));
  });

  test('fuzz: mutated headers either parse to tensors inside the file, or throw ERR_SAFETENSORS_INVALID', () => {
    const base = fileOf(
      {
        __metadata__: { format: 'pt' },
        w: { dtype: 'F32', shape: [4, 4], data_offsets: [0, 64] },
        b: { dtype: 'F16', shape: [8], data_offsets: [64, 80] },
        i: { dtype: 'I64', shape: [2, 1], data_offsets: [80, 96] },
      },
      96,
    );
    const r = rng(77);
    const alphabet = Buffer.from('{}[]",:0123456789-.eE ' + 'abcdefghijklmnopqrstuvwxyz_' + '\u00ff');
    let parsed = 0;
    for (let i = 0; i < 4000; i++) {
      const bytes = Buffer.from(base);
      const edits = 1 + r(4);
      for (let k = 0; k < edits; k++) {
        const at = r(bytes.length);
        bytes[at] = r(3) === 0 ? r(256) : alphabet[r(alphabet.length)];
      }
      const size = r(10) === 0 ? r(bytes.length + 1) : bytes.length;
      let h;
      try {
        h = cm.parseSafetensorsHeader(bytes, size);
      } catch (e) {
        expect(e.code).toBe('ERR_SAFETENSORS_INVALID');
        continue;
      }
      parsed++;
      let end = h.dataOffset;
      for (const t of h.tensors) {
        expect(t.begin).toBeGreaterThanOrEqual(end);
        expect(t.end).toBeLessThanOrEqual(size);
        expect(t.end - t.begin).toBe(t.shape.reduce((p, d) => p * d, cm.DTYPE_BYTES[t.dtype]));
        end = t.end;
      }
    }
    // Mutations in the data section or harmless places leave it valid: both outcomes were seen.
    expect(parsed).toBeGreaterThan(0);
  });

  test('readSafetensorsHeader reads only the header, and refuses what is not a file', () => {
    const p = path.join(dir, 'h.safetensors');
    fs.writeFileSync(p, fileOf({ x: { dtype: 'U8', shape: [3], data_offsets: [0, 3] } }, 3));
    expect(cm.readSafetensorsHeader(p).tensors).toHaveLength(1);
    expect(() => cm.readSafetensorsHeader(dir)).toThrow(expect.objectContaining({ code: 'ERR_FILE_IS_DIRECTORY' }));
    expect(() => cm.readSafetensorsHeader(path.join(dir, 'missing'))).toThrow(expect.objectContaining({ code: 'ERR_FILE_NOT_FOUND' }));
    const cut = path.join(dir, 'cut.safetensors');
    fs.writeFileSync(cut, fileOf('{"x":1}').subarray(0, 10));
    expect(() => cm.readSafetensorsHeader(cut)).toThrow(invalid(/runs past the end of the file/));
  });
});

describe('safetensors load and save on host memory', () => {
  const host = { alloc: (n) => new Uint8Array(n) };

  test('a file written by the reference implementation loads with its dtypes, shapes and bytes', () => {
    const f = path.join(__dirname, '..', 'fixtures', 'reference.safetensors');
    const l = cm.loadSafetensors(f, host);
    expect(l.metadata).toEqual({ a: 'b' });
    const get = (n) => {
      const t = l.tensors.get(n);
      return { dtype: t.dtype, shape: t.shape, bytes: Buffer.from(t.buffer.buffer, t.buffer.byteOffset + t.byteOffset, t.byteLength) };
    };
    expect(get('y')).toEqual({ dtype: 'I64', shape: [3], bytes: Buffer.from(new BigInt64Array([1n, 2n, 3n]).buffer) });
    expect(get('x').dtype).toBe('F16');
    expect(get('x').shape).toEqual([2, 5]);
    expect(get('x').bytes.readUInt16LE(2)).toBe(0x3c00); // 1.0 in half precision
    expect(get('e')).toEqual({ dtype: 'F32', shape: [0, 3], bytes: Buffer.alloc(0) });
    expect(l.buffers).toHaveLength(1);
  });

  test('save then load: one allocation or one per tensor, a subset, nothing allocated past the file', async () => {
    const a = randomBytes(3 * 1024 * 1024 + 4, 1);
    const b = randomBytes(1000, 2);
    const p = path.join(dir, 'rt.safetensors');
    const size = cm.saveSafetensors(
      p,
      { a: { dtype: 'F32', shape: [a.length / 4], buffer: a }, b: { dtype: 'U8', shape: [10, 10], buffer: b, byteOffset: 900 } },
      { metadata: { note: 'x' }, fsync: true },
    );
    expect(fs.statSync(p).size).toBe(size);
    expect(fs.readdirSync(dir).filter((n) => n.includes('.tmp-'))).toEqual([]);
    const asked = [];
    const one = cm.loadSafetensors(p, { alloc: (n) => (asked.push(n), new Uint8Array(n)) });
    expect(asked).toEqual([a.length + 100]);
    // One read of the whole span; a 3 MiB file just written is in the page cache: buffered.
    expect(one.reads).toEqual([expect.objectContaining({ bytes: a.length + 100, direct: false, directReason: expect.any(String) })]);
    const bytesOf = (t) => t.buffer.subarray(t.byteOffset, t.byteOffset + t.byteLength);
    expect(same(bytesOf(one.tensors.get('a')), a)).toBe(true);
    expect(same(bytesOf(one.tensors.get('b')), b.subarray(900))).toBe(true);
    expect(one.tensors.get('b').shape).toEqual([10, 10]);
    expect(one.metadata).toEqual({ note: 'x' });
    const each = await cm.loadSafetensorsAsync(p, { ...host, placement: 'each', names: ['b'], onProgress: () => {} });
    expect([...each.tensors.keys()]).toEqual(['b']);
    expect(each.buffers).toHaveLength(1);
    expect(each.reads).toEqual([expect.objectContaining({ bytes: 100, direct: false })]);
    expect(same(bytesOf(each.tensors.get('b')), b.subarray(900))).toBe(true);
    expect(() => cm.loadSafetensors(p, { ...host, names: ['zz'] })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => cm.loadSafetensors(p, { alloc: () => new Uint8Array(1) })).toThrow(/fewer than asked for/);
    // What was loaded saves again, byte for byte the same file.
    const again = path.join(dir, 'again.safetensors');
    await cm.saveSafetensorsAsync(again, one.tensors, { metadata: one.metadata });
    expect(same(fs.readFileSync(again), fs.readFileSync(p))).toBe(true);
  });

  test('a hostile file is refused before alloc is called', () => {
    const p = path.join(dir, 'hostile.safetensors');
    fs.writeFileSync(p, fileOf({ x: { dtype: 'U8', shape: [1 << 30], data_offsets: [0, 1 << 30] } }, 16));
    const asked = [];
    expect(() => cm.loadSafetensors(p, { alloc: (n) => (asked.push(n), new Uint8Array(n)) })).toThrow(
      invalid(/past the end of the data section/),
    );
    expect(asked).toEqual([]);
  });

  test('the writer checks its tensors, and a failed save leaves no file', () => {
    const p = path.join(dir, 'bad.safetensors');
    const u = new Uint8Array(8);
    expect(() => cm.saveSafetensors(p, { x: { dtype: 'F31', shape: [2], buffer: u } })).toThrow(TypeError);
    expect(() => cm.saveSafetensors(p, { x: { dtype: 'F32', shape: [3], buffer: u } })).toThrow(/byteOffset/);
    expect(() => cm.saveSafetensors(p, { x: { dtype: 'F32', shape: [2], buffer: u, byteLength: 4 } })).toThrow(RangeError);
    expect(() => cm.saveSafetensors(p, { __metadata__: { dtype: 'U8', shape: [1], buffer: u } })).toThrow(TypeError);
    expect(() => cm.saveSafetensors(path.join(dir, 'no-dir', 'x.safetensors'), { x: { dtype: 'U8', shape: [1], buffer: u } })).toThrow(
      expect.objectContaining({ code: 'ERR_FILE_NOT_FOUND' }),
    );
    expect(fs.existsSync(p)).toBe(false);
  });
});

describe('safetensors names, limits and crafted headers', () => {
  const host = { alloc: (n) => new Uint8Array(n) };
  const bytesOf = (t) => t.buffer.subarray(t.byteOffset, t.byteOffset + t.byteLength);
  // Names that are also properties of every object, or its prototype.
  const names = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'a', 'b'];

  test("every name is saved and loads back, from a Map or an object's own keys, tensors and metadata alike", () => {
    const data = names.map((_, i) => randomBytes(16 + i, 40 + i));
    const metadata = JSON.parse('{"__proto__":"p","constructor":"c","toString":"t","plain":"x"}');
    const asMap = new Map(names.map((n, i) => [n, { dtype: 'U8', shape: [data[i].length], buffer: data[i] }]));
    const asObject = {};
    for (const [n, t] of asMap) Object.defineProperty(asObject, n, { value: t, enumerable: true });
    for (const tensors of [asMap, asObject]) {
      const p = path.join(dir, 'names.safetensors');
      const size = cm.saveSafetensors(p, tensors, { metadata });
      const file = fs.readFileSync(p);
      expect(file.length).toBe(size);
      // The header as the reference reader sees it: every name, and offsets that tile the data
      // section with no hole.
      const n = Number(file.readBigUInt64LE(0));
      const header = JSON.parse(file.subarray(8, 8 + n).toString());
      expect(Object.keys(header).sort()).toEqual([...names, '__metadata__'].sort());
      expect(Object.keys(header.__metadata__).sort()).toEqual(Object.keys(metadata).sort());
      const spans = names.map((k) => header[k].data_offsets).sort((x, y) => x[0] - y[0]);
      let at = 0;
      for (const [begin, end] of spans) {
        expect(begin).toBe(at);
        at = end;
      }
      expect(8 + n + at).toBe(size);
      const l = cm.loadSafetensors(p, host);
      expect([...l.tensors.keys()].sort()).toEqual([...names].sort());
      names.forEach((name, i) => expect(same(bytesOf(l.tensors.get(name)), data[i])).toBe(true));
      expect(Object.entries(l.metadata).sort()).toEqual(Object.entries(metadata).sort());
      expect(Object.getPrototypeOf(l.metadata)).toBe(Object.prototype);
    }
  });

  test("a header above the loaders' limit is refused at save with the loader's code, leaving no file", () => {
    const p = path.join(dir, 'huge-header.safetensors');
    const u = new Uint8Array(1);
    expect(() =>
      cm.saveSafetensors(p, { x: { dtype: 'U8', shape: [1], buffer: u } }, { metadata: { big: 'x'.repeat(cm.SAFETENSORS_MAX_HEADER) } }),
    ).toThrow(invalid(/above the limit of 100000000 bytes/));
    expect(fs.readdirSync(dir).filter((f) => f.startsWith('huge-header'))).toEqual([]);
  });

  test('a crafted "constructor" in a header is reported, not printed into a TypeError', () => {
    const crafted = '{"constructor":{"name":{"toString":1,"valueOf":2}}}';
    for (const field of [
      '"dtype":' + crafted + ',"shape":[1],"data_offsets":[0,1]',
      '"dtype":"U8","shape":' + crafted + ',"data_offsets":[0,1]',
    ])
      expect(() => parse(fileOf(`{"x":{${field}}}`, 1))).toThrow(invalid(/an object/));
    expect(() => parse(fileOf(`{"__metadata__":{"k":${crafted}}}`))).toThrow(invalid(/__metadata__\["k"\] is an object/));
  });

  test('a header of 300,000 empty tensors loads (no stack overflow)', async () => {
    const header = {};
    for (let i = 0; i < 300000; i++) header[`t${i}`] = { dtype: 'U8', shape: [0], data_offsets: [0, 0] };
    header.last = { dtype: 'U8', shape: [3], data_offsets: [0, 3] };
    const p = path.join(dir, 'many.safetensors');
    const file = fileOf(header, 3);
    file.set([1, 2, 3], file.length - 3);
    fs.writeFileSync(p, file);
    for (const l of [cm.loadSafetensors(p, host), await cm.loadSafetensorsAsync(p, host)]) {
      expect(l.tensors.size).toBe(300001);
      expect([...bytesOf(l.tensors.get('last'))]).toEqual([1, 2, 3]);
      expect(l.tensors.get('t299999').byteLength).toBe(0);
    }
  });
});

describe('safetensors load while another process replaces the file', () => {
  test("every load returns one file's bytes (its metadata and its data agree) or a coded error", () => {
    const { spawn } = require('child_process');
    const p = path.join(dir, 'race.safetensors');
    // Two files of different layouts: A's data section starts where B's header still runs, so a
    // header of one read with the data of the other shows as bytes that are not the tensor's.
    const saver = `
      const cm = require(${JSON.stringify(require('../helpers').root)});
      const a = new Uint8Array(3000).fill(0x41);
      const b = new Uint8Array(5000).fill(0x42);
      for (;;) {
        cm.saveSafetensors(${JSON.stringify(p)}, { x: { dtype: 'U8', shape: [a.length], buffer: a } }, { metadata: { which: 'A' } });
        cm.saveSafetensors(${JSON.stringify(p)}, { x: { dtype: 'U8', shape: [b.length], buffer: b } }, { metadata: { which: 'B', pad: 'p'.repeat(4000) } });
      }`;
    cm.saveSafetensors(p, { x: { dtype: 'U8', shape: [1], buffer: new Uint8Array(1) } }, { metadata: { which: 'none' } });
    const child = spawn(process.execPath, ['-e', saver], { stdio: 'ignore' });
    const mixed = [];
    const seen = new Set();
    let loads = 0;
    try {
      // 3 s of loads once both files have been seen (the saver is running), 15 s at most.
      const start = Date.now();
      let until = Infinity;
      while (Date.now() < Math.min(until, start + 15000)) {
        if (until === Infinity && seen.has('A') && seen.has('B')) until = Date.now() + 3000;
        let l;
        try {
          l = cm.loadSafetensors(p, { alloc: (n) => new Uint8Array(n) });
        } catch (e) {
          expect(e.code).toMatch(/^ERR_/);
          continue;
        }
        loads++;
        const t = l.tensors.get('x');
        const bytes = t.buffer.subarray(t.byteOffset, t.byteOffset + t.byteLength);
        seen.add(l.metadata.which);
        const want = { A: [0x41, 3000], B: [0x42, 5000], none: [0, 1] }[l.metadata.which];
        if (!want || bytes.length !== want[1] || !bytes.every((v) => v === want[0])) mixed.push(l.metadata.which);
      }
    } finally {
      child.kill('SIGKILL');
    }
    expect(seen.has('A') && seen.has('B')).toBe(true);
    expect(loads).toBeGreaterThan(0);
    expect(mixed).toEqual([]);
  });
});

describeGpu('safetensors with device memory', () => {
  test('device tensors saved and loaded back onto the device, one allocation and per tensor from an allocator', () => {
    const a = randomBytes(5 * 1024 * 1024, 3);
    const b = randomBytes(4096 * 3, 4);
    const da = cm.DeviceBuffer.alloc(a.length);
    const db = cm.DeviceBuffer.alloc(b.length);
    const alloc = cm.createAllocator({ memoryLimit: 64 * 1024 * 1024 });
    try {
      cm.copy(da, a);
      cm.copy(db, b);
      const p = path.join(dir, 'dev.safetensors');
      cm.saveSafetensors(p, { a: { dtype: 'BF16', shape: [a.length / 2], buffer: da }, b: { dtype: 'I32', shape: [3, 1024], buffer: db } });
      const back = (t) => {
        const out = new Uint8Array(t.byteLength);
        cm.copy(out, t.buffer, { srcOffset: t.byteOffset, byteLength: t.byteLength });
        return out;
      };
      const one = cm.loadSafetensors(p);
      try {
        expect(one.buffers[0]).toBeInstanceOf(cm.DeviceBuffer);
        expect(same(back(one.tensors.get('a')), a)).toBe(true);
        expect(same(back(one.tensors.get('b')), b)).toBe(true);
      } finally {
        one.free();
      }
      const each = cm.loadSafetensors(p, { alloc: (n) => alloc.alloc(n), placement: 'each' });
      try {
        expect(same(back(each.tensors.get('a')), a)).toBe(true);
        expect(same(back(each.tensors.get('b')), b)).toBe(true);
      } finally {
        each.free();
      }
    } finally {
      da.free();
      db.free();
      alloc.close();
    }
  });
});
