// One GPU budget for a Node service and a program of another runtime: the service's allocator and
// a PyTorch process started with `cuda-memory run` share one group budget of 2 GiB.
//
// The service takes 512 MiB; the other program, started as a member of the same group, takes
// 256 MiB tensors until the budget refuses it with its own error (torch.OutOfMemoryError); the
// group lists both processes, each with its command line; the service is refused in turn while
// the other holds its share, and gets it once that program has exited.
//
// The other program is PyTorch where python3 has torch and there is a GPU; a plain CUDA
// allocation loop in Node (DeviceBuffer.alloc, charged by the interposer) where there is a GPU
// but no PyTorch; and without a GPU, a Node program that joins the group on a simulated device
// (`cuda-memory run --simulate`), so that the budget, the refusals and the listing are real.
// Run: node examples/shared-budget.js
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const cm = require('cuda-memory');

const MiB = 2 ** 20;
const BUDGET = 2048 * MiB;
const group = `shared-budget-example-${process.pid}`;
const gpu = cm.status().available;
const simulate = gpu ? {} : { simulate: { totalBytes: 80 * 2 ** 30 } };
// The package's command line, as `npx cuda-memory` finds it.
const pkgFile = require.resolve('cuda-memory/package.json');
const cli = path.join(path.dirname(pkgFile), JSON.parse(fs.readFileSync(pkgFile, 'utf8')).bin['cuda-memory']);
const lib = JSON.stringify(require.resolve('cuda-memory'));

// The other program: takes 256 MiB at a time until refused, says how far it got, then holds
// its memory until its input closes.
const PYTORCH = `
import sys, torch
held = []
try:
    while True:
        held.append(torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    print(f"took {len(held) * 256} MiB in 256 MiB tensors, then torch.OutOfMemoryError", flush=True)
print("holding", flush=True)
sys.stdin.read()
`;
const NODE = (take) => `
const cm = require(${lib});
${take}
const held = [];
let refusal = null;
for (;;) {
  try { held.push(take()); } catch (e) { refusal = e; break; }
}
console.log('took ' + held.length * 256 + ' MiB in 256 MiB blocks, then ' + refusal.name);
console.log('holding');
process.stdin.resume().on('end', () => process.exit(0));
`;
// The program is written to a file of its own, so that its command line says what it is.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shared-budget-example-'));
const write = (name, text) => (fs.writeFileSync(path.join(dir, name), text), path.join(dir, name));
const hasTorch = gpu && spawnSync('python3', ['-c', 'import torch; assert torch.cuda.is_available()']).status === 0;
const program = hasTorch
  ? { what: 'a PyTorch process', argv: ['python3', write('trainer.py', PYTORCH)] }
  : gpu
    ? {
        what: 'a Node process of plain cudaMalloc calls',
        argv: [process.execPath, write('cuda-loop.js', NODE('const take = () => cm.DeviceBuffer.alloc(256 * 2 ** 20);'))],
      }
    : {
        what: 'a Node process joining on a simulated device',
        argv: [
          process.execPath,
          write(
            'member.js',
            NODE(`const a = cm.createAllocator({ simulate: { totalBytes: 80 * 2 ** 30 }, allowGrowth: true, shared: { name: process.env.CUDA_MEMORY_GROUP } });
const take = () => a.alloc(256 * 2 ** 20);`),
          ),
        ],
      };

async function main() {
  // The service: the first member sets the budget.
  const service = cm.createAllocator({ ...simulate, allowGrowth: true, shared: { name: group, memoryLimit: BUDGET } });
  const own = [service.alloc(512 * MiB)];
  console.log(`service ${process.pid}: group ${group}, budget 2 GiB on ${gpu ? 'the GPU' : 'a simulated device'}; took 512 MiB`);

  // The other program, a member through `cuda-memory run` (the interposer preloaded on a GPU).
  console.log(`starting ${program.what}: cuda-memory run --group ${group}${gpu ? '' : ' --simulate 80GiB'} -- ${program.argv[0]} ...`);
  const child = spawn(process.execPath, [cli, 'run', '--group', group, ...(gpu ? [] : ['--simulate', '80GiB']), '--', ...program.argv], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let said = '';
  const holding = new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      said += d;
      if (said.includes('holding\n')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the program exited (${code}) before holding its memory:\n${said}`)));
  });
  // What the interposer says on the program's stderr (its refusals) is shown here.
  let told = '';
  child.stderr.on('data', (d) => (told += d));
  await holding;
  for (const line of said.trim().split('\n')) console.log(`  [program] ${line}`);
  for (const line of told.trim().split('\n').filter(Boolean)) console.log(`  [program's stderr] ${line}`);

  // A member publishes its bytes in use within a few milliseconds of a change.
  await new Promise((r) => setTimeout(r, 100));
  console.log('\nThe group now (what `cuda-memory top` shows):');
  console.log(cm.formatGroups({ groups: [service.group()], unreadable: [] }));

  // The service is refused while the other program holds its share...
  try {
    own.push(service.alloc(256 * MiB));
    console.log('\nservice: 256 MiB more fitted (the other program left room)');
  } catch (e) {
    if (!(e instanceof cm.OutOfMemoryError)) throw e;
    const why = e.message.split(/(?<=\.) /).find((x) => x.startsWith('The group')) || e.message;
    console.log(`\nservice: 256 MiB more refused: ${why}`);
  }
  // ...and gets it once the program has exited.
  child.stdin.end();
  await new Promise((r) => child.once('exit', r));
  own.push(service.alloc(256 * MiB));
  console.log(
    `the program exited; its share came back and the service took 256 MiB more (charged now: ${cm.formatBytes(service.group().chargedBytes)})`,
  );
  for (const b of own) b.free();
  service.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
