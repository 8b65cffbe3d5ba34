'use strict';
// node-llama-cpp sizing itself, for scripts/servers-run.js and examples/llama-beside-service.js:
//
//   node scripts/servers/llama-member.js --modules DIR --model FILE [--gpu-layers auto|max|N] [--ignore-safety]
//                                        [--context 512] [--tokens 16] [--seconds 0] [--hold 1] [--idle] [--cpu]
//
// DIR is a node_modules folder holding node-llama-cpp and its CUDA prebuilt. The CUDA backend is
// loaded (never built), what it sees of the GPU printed (node-llama-cpp's getVramState: total,
// used, free, which it takes from cudaMemGetInfo), then the model loaded with --gpu-layers
// ('auto': as many as node-llama-cpp finds room for; 'max': every layer, which it refuses with
// its InsufficientMemoryError where they do not fit; --ignore-safety skips that estimate, so the
// allocation itself meets the budget), a context made and --tokens generated, again and again
// for --seconds. Flash attention is left off. Each step prints `phase NAME` (ready, loaded,
// generated) and is held --hold seconds; --idle stops after `ready`; --cpu loads the CPU backend
// instead (to try a model file without a GPU). One JSON line at the end; a
// refusal is caught and reported, and the process ends normally.
const path = require('path');
const { pathToFileURL } = require('url');
const { parseArgs } = require('util');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const text = ['modules', 'model', 'gpu-layers', 'context', 'tokens', 'seconds', 'hold'];
  const { values: o } = parseArgs({
    options: {
      ...Object.fromEntries(text.map((k) => [k, { type: 'string' }])),
      'ignore-safety': { type: 'boolean' },
      idle: { type: 'boolean' },
      cpu: { type: 'boolean' },
    },
  });
  if (!o.modules || (!o.model && !o.idle)) {
    process.stderr.write('usage: node scripts/servers/llama-member.js --modules DIR --model FILE [--gpu-layers auto|max|N] [--idle]\n');
    return 2;
  }
  const hold = Number(o.hold ?? 1) * 1000;
  const phase = async (name) => {
    process.stdout.write(`phase ${name}\n`);
    await sleep(hold);
  };
  const out = { pid: process.pid, loaded: false, tokens: 0, generations: 0 };
  const nlc = await import(pathToFileURL(path.join(path.resolve(o.modules), 'node-llama-cpp', 'dist', 'index.js')).href);
  const llama = await nlc.getLlama({ gpu: o.cpu ? false : 'cuda', build: 'never', logLevel: 'error', progressLogs: false });
  out.gpu = llama.gpu;
  out.vram = await llama.getVramState();
  await phase('ready');
  if (o.idle) {
    process.stdout.write(JSON.stringify(out) + '\n');
    await llama.dispose();
    return 0;
  }

  const layers = o['gpu-layers'] ?? 'auto';
  out.asked = layers;
  let model = null;
  try {
    model = await llama.loadModel({
      modelPath: o.model,
      gpuLayers: layers === 'auto' || layers === 'max' ? layers : Number(layers),
      defaultContextFlashAttention: false,
      ignoreMemorySafetyChecks: Boolean(o['ignore-safety']),
    });
  } catch (e) {
    // node-llama-cpp's own refusal (InsufficientMemoryError), or llama.cpp's failed load.
    out.error = { name: e.constructor.name, message: String(e.message).slice(0, 400) };
    out.vramAfter = await llama.getVramState();
    process.stdout.write(JSON.stringify(out) + '\n');
    await llama.dispose();
    return 0;
  }
  out.loaded = true;
  out.gpuLayers = model.gpuLayers;
  out.totalLayers = model.fileInsights.totalLayers;
  out.vramLoaded = await llama.getVramState();
  await phase('loaded');

  const context = await model.createContext({ contextSize: Number(o.context ?? 512), flashAttention: false });
  const sequence = context.getSequence();
  const completion = new nlc.LlamaCompletion({ contextSequence: sequence });
  const deadline = Date.now() + Number(o.seconds ?? 0) * 1000;
  do {
    await sequence.clearHistory();
    const t = await completion.generateCompletion('The budget is', {
      maxTokens: Number(o.tokens ?? 16),
      onToken: (tokens) => (out.tokens += tokens.length),
    });
    out.generations++;
    if (out.generations === 1) {
      out.sample = t.slice(0, 80);
      out.vramGenerated = await llama.getVramState();
      await phase('generated');
    }
  } while (Date.now() < deadline);
  completion.dispose();
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  process.stdout.write(JSON.stringify(out) + '\n');
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`llama-member: ${e.stack || e.message}\n`);
    process.exit(1);
  },
);
