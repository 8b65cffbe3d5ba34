#!/usr/bin/env node
// Checks the typings as a user's project meets them: the packed tarball installed into a fresh
// project (`"type": "commonjs"`, as `npm init -y` writes it), a file that imports the package from
// CommonJS and one from an ES module, compiled with `tsc --noEmit` under `strict` and the `lib`
// the README recommends (no DOM), for module `nodenext` and `bundler`, with TypeScript 5.0 (the
// oldest the README supports), TypeScript 5 and the latest TypeScript (the devDependencies
// `typescript-5.0`, `typescript` and `typescript-latest`), with and without
// @types/node; then the README's own tsconfig.json; then the default import of every entry point
// (`import cm, { copy } from 'cuda-memory'`, `cuda-memory/bench`, `/metrics`, `/testing`) compiled and run: tsc to CommonJS and to an ES module,
// esbuild to CommonJS and to an ES module with the package external. Exits 1 if any check fails,
// printing the compiler's errors or the program's.
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
fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'typings-check', private: true, type: 'commonjs' }));
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
const expect: Gate = parseGate('h2d.pinned>=48GB/s');
export const floor: number = expect.value + summarize([1, 2, 3]).median;
export const text: string = metricsText({ devices: false });
`;
fs.writeFileSync(
  path.join(project, 'cjs.ts'),
  `import { createAllocator, copy, status, DeviceBuffer, CudaStatus as Status } from 'cuda-memory';\nimport { createLeakGate, LeakGate } from 'cuda-memory/testing';\nimport { parseGate, summarize, Gate } from 'cuda-memory/bench';\nimport { metricsText } from 'cuda-memory/metrics';\n${use}`,
);
fs.writeFileSync(
  path.join(project, 'esm.mts'),
  `import { createAllocator, copy, status, type DeviceBuffer, type CudaStatus as Status } from 'cuda-memory';\nimport { createLeakGate, type LeakGate } from 'cuda-memory/testing';\nimport { parseGate, summarize, type Gate } from 'cuda-memory/bench';\nimport { metricsText } from 'cuda-memory/metrics';\n${use}`,
);

// The README's tsconfig.json, exactly: its first JSON block that holds compilerOptions.
const readmeTsconfig = [...fs.readFileSync(path.join(root, 'README.md'), 'utf8').matchAll(/```json\n([\s\S]*?)```/g)]
  .map((m) => m[1])
  .find((t) => t.includes('compilerOptions'));
if (!readmeTsconfig) throw new Error('check-typings: the README has no tsconfig.json block');
const readmeLib = JSON.parse(readmeTsconfig).compilerOptions.lib;

// The oldest TypeScript the README supports (the devDependency `typescript-5.0`), the one the
// package is built with, and the latest. TypeScript 5.0 and 5.1 know no `esnext.disposable` lib
// (the README says so): they check with the README's lib less it.
const compilers = [
  ['TypeScript 5', path.join(root, 'node_modules', 'typescript', 'bin', 'tsc')],
  ['TypeScript 5.0, the oldest supported', path.join(root, 'node_modules', 'typescript-5.0', 'bin', 'tsc')],
  ['TypeScript latest', path.join(root, 'node_modules', 'typescript-latest', 'bin', 'tsc')],
];
const libFor = (version) => {
  const [major, minor] = (/(\d+)\.(\d+)/.exec(version) || []).slice(1).map(Number);
  return major === 5 && minor < 2 ? readmeLib.filter((l) => l.toLowerCase() !== 'esnext.disposable') : readmeLib;
};
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
        lib: libFor(version),
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

// Prints one check's outcome, and its output when it failed.
function report(ok, label, output) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${label}`);
  if (!ok) {
    failed++;
    console.log(output.trim().replace(/^/gm, '     '));
  }
}
const run = (cmd, args) => {
  const r = spawnSync(cmd, args, { cwd: project, encoding: 'utf8' });
  return { ok: r.status === 0, output: `${r.stdout || ''}${r.stderr || ''}${r.error ? r.error.message : ''}` };
};

// The README's default import, used the way its examples use it, and the same of every other
// entry point.
const useDefault = `import cm, { copy, status } from 'cuda-memory';
import bench, { parseGate } from 'cuda-memory/bench';
import metrics, { metricsText } from 'cuda-memory/metrics';
import testing, { createLeakGate } from 'cuda-memory/testing';
if (cm.copy !== copy || cm.status !== status || typeof cm.status().available !== 'boolean')
  throw new Error('the default import is not the package: ' + typeof cm);
if (bench.parseGate !== parseGate || metrics.metricsText !== metricsText || testing.createLeakGate !== createLeakGate)
  throw new Error('a default import is not its entry point: ' + [typeof bench, typeof metrics, typeof testing].join());
if (bench.parseGate('h2d.pinned>=1GB/s').value !== 1) throw new Error('cuda-memory/bench: parseGate');
`;
fs.writeFileSync(path.join(project, 'default.ts'), useDefault);
fs.writeFileSync(path.join(project, 'default.mts'), useDefault);

fs.writeFileSync(path.join(project, 'tsconfig.json'), readmeTsconfig);
const inReadme = JSON.parse(readmeTsconfig);
// Every consumer file of the project, as the README's tsconfig.json finds them (checked, not emitted).
const readmeBuild = run(process.execPath, [compilers[0][1], '-p', 'tsconfig.json', '--noEmit']);
report(
  readmeBuild.ok,
  `the README's tsconfig.json (${JSON.stringify(inReadme.compilerOptions)}), ${compilers[0][0]}, without @types/node`,
  readmeBuild.output,
);

fs.writeFileSync(
  path.join(project, 'tsconfig.json'),
  JSON.stringify(
    { compilerOptions: { ...inReadme.compilerOptions, types: [], outDir: 'out' }, files: ['default.ts', 'default.mts'] },
    null,
    2,
  ),
);
const emitted = run(process.execPath, [compilers[0][1], '-p', 'tsconfig.json']);
report(emitted.ok, 'the default import, compiled by tsc (module nodenext) to CommonJS and to an ES module', emitted.output);
if (emitted.ok) {
  const cjs = run(process.execPath, ['out/default.js']);
  report(cjs.ok, 'the default import, run from tsc\'s CommonJS output ("type": "commonjs")', cjs.output);
  const esm = run(process.execPath, ['out/default.mjs']);
  report(esm.ok, "the default import, run from tsc's ES module output", esm.output);
}
const esbuild = process.env.ESBUILD || path.join(root, 'node_modules', '.bin', 'esbuild');
for (const format of ['cjs', 'esm']) {
  const out = `esbuild-default.${format === 'cjs' ? 'cjs' : 'mjs'}`;
  const bundled = run(esbuild, [
    'default.ts',
    '--bundle',
    '--platform=node',
    `--format=${format}`,
    '--external:cuda-memory',
    '--log-level=error',
    `--outfile=${out}`,
  ]);
  const ran = bundled.ok ? run(process.execPath, [out]) : bundled;
  report(ran.ok, `the default import, bundled by esbuild --format=${format} --external:cuda-memory and run`, ran.output);
}

console.log(failed ? `typings: ${failed} checks failed` : 'typings: every check passed');
process.exit(failed ? 1 : 0);
