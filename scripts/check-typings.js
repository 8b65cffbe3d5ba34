#!/usr/bin/env node
// Checks the typings as a user's project meets them: the packed tarball installed into a fresh
// project, a file that imports the package from CommonJS and one from an ES module, compiled with
// `tsc --noEmit` under `strict`, for module `nodenext` and `bundler`, with TypeScript 5 and the
// latest TypeScript (the devDependencies `typescript` and `typescript-latest`), with and without
// @types/node. Exits 1 if any of the 8 combinations fails, printing the compiler's errors.
//
//   node scripts/check-typings.js [cuda-memory-x.y.z.tgz]   (packs one when none is given)
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');

const root = path.join(__dirname, '..');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-typings-'));
process.on('exit', () => fs.rmSync(work, { recursive: true, force: true }));

let tarball = process.argv[2] && path.resolve(process.argv[2]);
if (!tarball) {
  const name = execFileSync('npm', ['pack', '--silent', '--pack-destination', work], { cwd: root, encoding: 'utf8' })
    .trim()
    .split('\n')
    .pop();
  tarball = path.join(work, name);
}

// The project: the package installed (no install script: only its files matter here).
const project = path.join(work, 'project');
fs.mkdirSync(project);
fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'typings-check', private: true }));
execFileSync('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--silent', tarball], { cwd: project, stdio: 'inherit' });

const use = `
const a = createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true });
const b: DeviceBuffer = a.alloc(1024);
const host = new Uint8Array(1024);
copy(host, host);
const s: Status = status();
b[Symbol.dispose]();
a.close();
export const reason: string | null = s.reason;
const gate: LeakGate = createLeakGate({ driver: 'off' });
gate.begin();
export const leaked: number = gate.end('t').leaks.length;
`;
fs.writeFileSync(
  path.join(project, 'cjs.ts'),
  `import { createAllocator, copy, status, DeviceBuffer, CudaStatus as Status } from 'cuda-memory';\nimport { createLeakGate, LeakGate } from 'cuda-memory/testing';\n${use}`,
);
fs.writeFileSync(
  path.join(project, 'esm.mts'),
  `import { createAllocator, copy, status, type DeviceBuffer, type CudaStatus as Status } from 'cuda-memory';\nimport { createLeakGate, type LeakGate } from 'cuda-memory/testing';\n${use}`,
);

const compilers = [
  ['TypeScript 5', path.join(root, 'node_modules', 'typescript', 'bin', 'tsc')],
  ['TypeScript latest', path.join(root, 'node_modules', 'typescript-latest', 'bin', 'tsc')],
];
const typeRoot = path.join(root, 'node_modules', '@types');
let failed = 0;
for (const [label, tsc] of compilers) {
  const version = spawnSync(process.execPath, [tsc, '--version'], { encoding: 'utf8' }).stdout.trim();
  for (const mode of ['nodenext', 'bundler'])
    for (const withNode of [false, true]) {
      const compilerOptions = {
        strict: true,
        noEmit: true,
        target: 'ES2022',
        module: mode === 'nodenext' ? 'nodenext' : 'esnext',
        moduleResolution: mode,
        types: withNode ? ['node'] : [],
        typeRoots: withNode ? [typeRoot] : [],
      };
      // Under bundler resolution every file is an ES module; the .mts file covers that.
      const files = mode === 'nodenext' ? ['cjs.ts', 'esm.mts'] : ['esm.mts'];
      fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions, files }, null, 2));
      const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: project, encoding: 'utf8' });
      const ok = r.status === 0;
      console.log(`${ok ? 'ok  ' : 'FAIL'} ${version} (${label}), module ${mode}, ${withNode ? 'with' : 'without'} @types/node`);
      if (!ok) {
        failed++;
        console.log((r.stdout + r.stderr).trim().replace(/^/gm, '     '));
      }
    }
}
console.log(failed ? `typings: ${failed} of 8 combinations failed` : 'typings: all 8 combinations compile');
process.exit(failed ? 1 : 0);
