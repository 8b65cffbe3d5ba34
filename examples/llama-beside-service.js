// A llama.cpp model server (node-llama-cpp) beside a Node service, under one group budget: the
// service's allocator takes 1 GiB of a 6 GiB group, then node-llama-cpp, started with
// `cuda-memory run`, loads a model with gpuLayers 'auto': it sizes its offload by what
// cudaMemGetInfo tells it, which is what the group has left, not the whole GPU. The group lists
// both; the service is refused past the budget while the model is loaded, and gets the room back
// once the model server has exited.
// Run: node examples/llama-beside-service.js --model FILE.gguf [--budget 6GiB]
// Needs node-llama-cpp (npm install node-llama-cpp) with its CUDA prebuilt and the CUDA runtime it
// links (libcudart, libcublas) on the loader's path, and a GPU; without node-llama-cpp or a GPU the
// example says so in one line and exits 2. In a clone without --model it writes a model of random
// weights (scripts/servers/gguf.js, 4 layers, 1.1 GiB) to the temporary folder.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const cm = require('cuda-memory');

const args = process.argv.slice(2);
const opt = (name, dflt) => (args.includes(name) ? args[args.indexOf(name) + 1] : dflt);
const GiB = 2 ** 30;

// The model server, started by the service below as a member of its group.
async function member(model) {
  const { getLlama, LlamaCompletion } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: 'cuda', build: 'never', logLevel: 'error' });
  const vram = await llama.getVramState();
  const m = await llama.loadModel({ modelPath: model, gpuLayers: 'auto', defaultContextFlashAttention: false });
  const context = await m.createContext({ contextSize: 512 });
  const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
  const text = await completion.generateCompletion('The budget is', { maxTokens: 8 });
  console.log(
    `told ${cm.formatBytes(vram.free)} free of ${cm.formatBytes(vram.total)}; offloaded ${m.gpuLayers} of ${m.fileInsights.totalLayers} layers; generated ${JSON.stringify(text)}`,
  );
  console.log('holding');
  await new Promise((r) => process.stdin.resume().on('end', r));
  await llama.dispose();
}

async function service() {
  try {
    await import('node-llama-cpp');
  } catch (e) {
    if (e.code !== 'ERR_MODULE_NOT_FOUND') throw e;
    console.error('llama-beside-service.js needs node-llama-cpp: npm install node-llama-cpp');
    return 2;
  }
  if (!cm.status().available) {
    console.error(`llama-beside-service.js needs a GPU: ${cm.status().message}`);
    return 2;
  }
  let model = opt('--model');
  const writer = path.join(__dirname, '..', 'scripts', 'servers', 'gguf.js');
  if (!model && fs.existsSync(writer)) {
    model = path.join(os.tmpdir(), 'random-llama-4x4096.gguf');
    if (!fs.existsSync(model)) require(writer).writeGguf(model, { layers: 4 });
  }
  if (!model) {
    console.error('usage: node examples/llama-beside-service.js --model FILE.gguf [--budget 6GiB]');
    return 2;
  }
  const budget = cm.parseSize(opt('--budget', '6GiB'));
  const group = `llama-example-${process.pid}`;
  const a = cm.createAllocator({ allowGrowth: true, shared: { name: group, memoryLimit: budget } });
  const own = [a.alloc(GiB)];
  console.log(`service ${process.pid}: group ${group}, budget ${cm.formatBytes(budget)}; took 1 GiB`);

  const pkg = require.resolve('cuda-memory/package.json');
  const cli = path.join(path.dirname(pkg), JSON.parse(fs.readFileSync(pkg, 'utf8')).bin['cuda-memory']);
  const child = spawn(process.execPath, [cli, 'run', '--group', group, '--', process.execPath, __filename, '--member', model], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let said = '';
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => (said += d) && said.includes('holding\n') && resolve());
    child.once('exit', (code) => reject(new Error(`the model server exited (${code}):\n${said}`)));
  });
  console.log(`  [model server] ${said.split('\n')[0]}`);
  console.log(cm.formatGroups({ groups: [a.group()], unreadable: [] }));
  try {
    own.push(a.alloc(budget - GiB));
    console.log('service: the rest of the budget fitted (the model server left it)');
  } catch (e) {
    if (!(e instanceof cm.OutOfMemoryError)) throw e;
    console.log(`service: ${cm.formatBytes(budget - GiB)} more refused while the model is loaded`);
  }
  child.stdin.end();
  await new Promise((r) => child.once('exit', r));
  own.push(a.alloc(GiB));
  console.log(`the model server exited; its share came back (charged now: ${cm.formatBytes(a.group().chargedBytes)})`);
  for (const b of own) b.free();
  a.close();
  return 0;
}

(args[0] === '--member' ? member(args[1]).then(() => 0) : service()).then(
  (code) => process.exit(code),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
