// Loads a safetensors file onto the GPU: its header first (checked against the file), then every
// tensor in one device allocation, read through the pinned ring. Without a GPU it prints the header
// and says what it would do. With no file given, it writes a small one to load (and removes it).
// Run: node examples/load-safetensors.js [model.safetensors]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const cm = require('cuda-memory');

let file = process.argv[2];
if (!file) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-example-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true })); // the file is ours: remove it
  file = path.join(dir, 'tiny.safetensors');
  const weight = new Float32Array(256 * 256).map((_, i) => Math.sin(i));
  const bias = new Float32Array(256).fill(0.5);
  cm.saveSafetensors(
    file,
    { 'layer.weight': { dtype: 'F32', shape: [256, 256], buffer: weight }, 'layer.bias': { dtype: 'F32', shape: [256], buffer: bias } },
    { metadata: { format: 'pt' } },
  );
  console.log(`wrote ${file}`);
}

const header = cm.readSafetensorsHeader(file);
console.log(`${file}: ${header.tensors.length} tensors, header ${header.headerBytes} bytes, metadata ${JSON.stringify(header.metadata)}`);
for (const t of header.tensors)
  console.log(`  ${t.name}: ${t.dtype} [${t.shape.join(', ')}], ${cm.formatBytes(t.end - t.begin)} at byte ${t.begin}`);

const st = cm.status();
if (!st.available) {
  const total = header.tensors.reduce((s, t) => s + t.end - t.begin, 0);
  console.log(`no GPU (${st.reason}): would allocate ${cm.formatBytes(total)} on device 0 and read the tensors into it in one pass`);
  process.exit(0);
}

(async () => {
  const t0 = process.hrtime.bigint();
  const loaded = await cm.loadSafetensorsAsync(file, {
    onProgress: (done, total) => process.stdout.write(`\r${cm.formatBytes(done)} of ${cm.formatBytes(total)}`),
  });
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`\nloaded ${cm.formatBytes(loaded.bytes)} in ${(s * 1e3).toFixed(1)} ms (${(loaded.bytes / s / 1e9).toFixed(2)} GB/s)`);
  try {
    // A tensor is a range of the allocation: copy a few of its values back to look at them.
    const first = loaded.tensors.get(header.tensors[0].name);
    const peek = new Uint8Array(Math.min(16, first.byteLength));
    cm.copy(peek, first.buffer, { srcOffset: first.byteOffset, byteLength: peek.length });
    console.log(`${first.name} starts with bytes ${Buffer.from(peek).toString('hex')}`);
  } finally {
    loaded.free();
  }
})();
