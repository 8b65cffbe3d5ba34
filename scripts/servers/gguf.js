'use strict';
// A GGUF file of a llama-architecture model with random weights, for scripts/servers-run.js (no
// model can be downloaded on the GPU machine, and a real server should load a real file):
//
//   node scripts/servers/gguf.js --out FILE [--layers 20] [--embd 4096] [--ff 11008] [--heads 32] [--vocab 32000]
//
// The defaults give 8.0 GiB of f16 weights (a llama-7B's layer shapes, 20 of them). The file holds
// what llama.cpp's loader asks of the llama architecture (llama-arch.cpp, llama-model.cpp) and of an
// SPM ("llama") vocabulary: the hyperparameters, the tokens with their scores and types (with the
// 256 byte tokens `<0x00>`..`<0xFF>` that its byte fallback looks up), and every tensor by its
// name, in GGUF v3 (github.com/ggml-org/ggml, docs/gguf.md). Norms are f32 ones; the matrices f16,
// uniform in ±0.02, so that activations stay finite through the layers and tokens come out.
const fs = require('fs');

const ALIGN = 32;
const T = { UINT32: 4, INT32: 5, FLOAT32: 6, STRING: 8, ARRAY: 9 };
const F32 = 0;
const F16 = 1;

/** The model's shapes, with the defaults above. */
function dims(o = {}) {
  const d = { layers: 20, embd: 4096, ff: 11008, heads: 32, vocab: 32000, context: 2048, ...o };
  for (const [k, v] of Object.entries(d))
    if (!Number.isInteger(v) || v <= 0) throw new RangeError(`gguf: ${k} must be a positive integer, got ${v}`);
  if (d.embd % d.heads) throw new RangeError(`gguf: embd (${d.embd}) must be a multiple of heads (${d.heads})`);
  if (d.vocab < 259 + 95)
    throw new RangeError(`gguf: vocab must be at least 354 (3 special, 256 byte, 95 printable tokens), got ${d.vocab}`);
  return d;
}

/** The tensors, in file order: name, ggml dims (ne0 first), type. */
function tensors(d) {
  const t = [['token_embd.weight', [d.embd, d.vocab], F16]];
  for (let i = 0; i < d.layers; i++) {
    const b = `blk.${i}.`;
    t.push(
      [`${b}attn_norm.weight`, [d.embd], F32],
      [`${b}attn_q.weight`, [d.embd, d.embd], F16],
      [`${b}attn_k.weight`, [d.embd, d.embd], F16],
      [`${b}attn_v.weight`, [d.embd, d.embd], F16],
      [`${b}attn_output.weight`, [d.embd, d.embd], F16],
      [`${b}ffn_norm.weight`, [d.embd], F32],
      [`${b}ffn_gate.weight`, [d.embd, d.ff], F16],
      [`${b}ffn_up.weight`, [d.embd, d.ff], F16],
      [`${b}ffn_down.weight`, [d.ff, d.embd], F16],
    );
  }
  t.push(['output_norm.weight', [d.embd], F32], ['output.weight', [d.embd, d.vocab], F16]);
  return t.map(([name, shape, type]) => ({ name, shape, type, bytes: shape.reduce((a, b) => a * b, 1) * (type === F16 ? 2 : 4) }));
}

/** The vocabulary: <unk>, <s>, </s>, the 256 byte tokens, the printable characters, then filler words. */
function vocabulary(n) {
  const tokens = ['<unk>', '<s>', '</s>'];
  const types = [2, 3, 3]; // unknown, control, control
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(6); // byte
  }
  for (let c = 32; c < 127; c++) {
    tokens.push(c === 32 ? '\u2581' : String.fromCharCode(c)); // SPM writes a space as U+2581
    types.push(1);
  }
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (let i = 0; tokens.length < n; i++) {
    let w = '';
    for (let k = i; ; k = Math.floor(k / 26) - 1) {
      w = letters[k % 26] + w;
      if (k < 26) break;
    }
    tokens.push(`\u2581${w}`);
    types.push(1);
  }
  const scores = tokens.map((_, i) => (i < 259 ? 0 : -(i - 258)));
  return { tokens, scores, types };
}

// ---- encoding ---------------------------------------------------------------------------------

class Out {
  constructor() {
    this.parts = [];
  }
  u32(v) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.parts.push(b);
  }
  i32(v) {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.parts.push(b);
  }
  u64(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.parts.push(b);
  }
  f32(v) {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.parts.push(b);
  }
  str(s) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.parts.push(b);
  }
  kv(key, type, value) {
    this.str(key);
    this.u32(type);
    this.value(type, value);
  }
  array(key, elemType, values) {
    this.str(key);
    this.u32(T.ARRAY);
    this.u32(elemType);
    this.u64(values.length);
    for (const v of values) this.value(elemType, v);
  }
  value(type, v) {
    if (type === T.UINT32) this.u32(v);
    else if (type === T.INT32) this.i32(v);
    else if (type === T.FLOAT32) this.f32(v);
    else if (type === T.STRING) this.str(v);
    else throw new TypeError(`gguf: no encoding for type ${type}`);
  }
  buffer() {
    return Buffer.concat(this.parts);
  }
}

/** The header, the metadata and the tensor infos, padded to the alignment; and the tensors with their offsets. */
function header(d) {
  const list = tensors(d);
  const v = vocabulary(d.vocab);
  const o = new Out();
  const kvs = [
    ['general.architecture', T.STRING, 'llama'],
    ['general.name', T.STRING, `random-llama-${d.layers}x${d.embd}`],
    ['general.alignment', T.UINT32, ALIGN],
    ['general.file_type', T.UINT32, 1], // LLAMA_FTYPE_MOSTLY_F16
    ['llama.context_length', T.UINT32, d.context],
    ['llama.embedding_length', T.UINT32, d.embd],
    ['llama.block_count', T.UINT32, d.layers],
    ['llama.feed_forward_length', T.UINT32, d.ff],
    ['llama.attention.head_count', T.UINT32, d.heads],
    ['llama.attention.head_count_kv', T.UINT32, d.heads],
    ['llama.attention.layer_norm_rms_epsilon', T.FLOAT32, 1e-5],
    ['llama.rope.dimension_count', T.UINT32, d.embd / d.heads],
    ['llama.rope.freq_base', T.FLOAT32, 10000],
    ['llama.vocab_size', T.UINT32, d.vocab],
    ['tokenizer.ggml.model', T.STRING, 'llama'],
    ['tokenizer.ggml.unknown_token_id', T.UINT32, 0],
    ['tokenizer.ggml.bos_token_id', T.UINT32, 1],
    ['tokenizer.ggml.eos_token_id', T.UINT32, 2],
  ];
  o.parts.push(Buffer.from('GGUF'));
  o.u32(3);
  o.u64(list.length);
  o.u64(kvs.length + 3);
  for (const [k, t, val] of kvs) o.kv(k, t, val);
  o.array('tokenizer.ggml.tokens', T.STRING, v.tokens);
  o.array('tokenizer.ggml.scores', T.FLOAT32, v.scores);
  o.array('tokenizer.ggml.token_type', T.INT32, v.types);
  let offset = 0;
  for (const t of list) {
    o.str(t.name);
    o.u32(t.shape.length);
    for (const n of t.shape) o.u64(n);
    o.u32(t.type);
    o.u64(offset);
    t.offset = offset;
    offset += Math.ceil(t.bytes / ALIGN) * ALIGN;
  }
  const head = o.buffer();
  const padded = Buffer.alloc(Math.ceil(head.length / ALIGN) * ALIGN);
  head.copy(padded);
  return { head: padded, tensors: list, dataBytes: offset };
}

// f16 bits of a float in ±0.02 (exponent and mantissa by hand; no NaN, infinity or subnormal).
function f16(x) {
  const sign = x < 0 ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a < 2 ** -14) return sign; // below f16's normal range: zero
  const e = Math.floor(Math.log2(a));
  const m = Math.round((a / 2 ** e - 1) * 1024);
  return sign | ((e + 15) << 10) | Math.min(m, 1023);
}

// 4 MiB of random f16 values, the pool every f16 tensor is cut from at a moving offset.
function randomPool(seed) {
  let s = seed >>> 0 || 1;
  const pool = Buffer.alloc(4 * 2 ** 20);
  for (let i = 0; i < pool.length; i += 2) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    pool.writeUInt16LE(f16((s / 4294967296 - 0.5) * 0.04), i);
  }
  return pool;
}

/** Writes the model to `file`; returns its size and shapes. */
function writeGguf(file, options = {}) {
  const d = dims(options);
  const { head, tensors: list, dataBytes } = header(d);
  const pool = randomPool(options.seed || 1);
  const fd = fs.openSync(file, 'w', 0o644);
  try {
    fs.writeSync(fd, head);
    const chunk = Buffer.alloc(16 * 2 ** 20);
    let at = 0; // where in the pool the next value comes from
    for (const t of list) {
      let left = Math.ceil(t.bytes / ALIGN) * ALIGN;
      if (t.type === F32) {
        const ones = Buffer.alloc(left);
        for (let i = 0; i < t.bytes; i += 4) ones.writeFloatLE(1, i);
        fs.writeSync(fd, ones);
        continue;
      }
      while (left > 0) {
        const n = Math.min(left, chunk.length);
        for (let i = 0; i < n;) {
          const k = Math.min(pool.length - at, n - i);
          pool.copy(chunk, i, at, at + k);
          i += k;
          at = (at + k) % pool.length;
        }
        at = (at + 2 * 7919) % pool.length; // an odd step, so that chunks do not repeat each other
        fs.writeSync(fd, chunk, 0, n);
        left -= n;
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return { file, bytes: head.length + dataBytes, dims: d, tensors: list.length, weightsBytes: list.reduce((s, t) => s + t.bytes, 0) };
}

module.exports = { writeGguf, dims, tensors, vocabulary, header, f16 };

if (require.main === module) {
  const { parseArgs } = require('util');
  const names = ['out', 'layers', 'embd', 'ff', 'heads', 'vocab', 'context', 'seed'];
  const { values } = parseArgs({ options: Object.fromEntries(names.map((k) => [k, { type: 'string' }])) });
  if (!values.out) {
    process.stderr.write(
      'usage: node scripts/servers/gguf.js --out FILE [--layers 20] [--embd 4096] [--ff 11008] [--heads 32] [--vocab 32000]\n',
    );
    process.exit(2);
  }
  const o = Object.fromEntries(names.filter((k) => k !== 'out' && values[k] !== undefined).map((k) => [k, Number(values[k])]));
  process.stdout.write(JSON.stringify(writeGguf(values.out, o)) + '\n');
}
