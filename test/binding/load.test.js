'use strict';
const path = require('path');
const fs = require('fs');
const { execFileSync } = require('child_process');
const { cm } = require('../helpers');

const root = path.join(__dirname, '..', '..');

// The entry points a program imports by name: those of package.json's exports with an `import`
// and a `require` condition ("." and the three by audience); the test runners' own entry points
// (jest-environment, node-test, vitest) are tested with the leak gate.
const exportsMap = require(path.join(root, 'package.json')).exports;
const ENTRY_NAMES = Object.keys(exportsMap)
  .filter((k) => exportsMap[k].import && exportsMap[k].require)
  .map((k) => (k === '.' ? 'cuda-memory' : `cuda-memory/${k.slice(2)}`));
const entryFile = (name) =>
  path.join(root, exportsMap[name === 'cuda-memory' ? '.' : `./${name.slice('cuda-memory/'.length)}`].require.default);

function nodeEval(code, env = {}) {
  return execFileSync(process.execPath, ['-e', code], { cwd: root, env: { ...process.env, ...env }, encoding: 'utf8' });
}

describe('loading', () => {
  test('require never throws and status() reports a complete state', () => {
    const st = cm.status();
    expect(typeof st.available).toBe('boolean');
    expect(typeof st.message).toBe('string');
    expect(st.message.length).toBeGreaterThan(0);
    if (st.available) {
      expect(st.reason).toBeNull();
      expect(st.deviceCount).toBeGreaterThan(0);
    } else {
      expect(['NOT_BUILT_WITH_CUDA', 'NO_DRIVER', 'INSUFFICIENT_DRIVER', 'NO_DEVICE', 'ADDON_NOT_LOADED']).toContain(st.reason);
      expect(st.deviceCount).toBe(0);
    }
  });

  test('without a loadable addon, require still works and every GPU call says why', () => {
    const out = nodeEval(
      `const cm = require('.'); const s = cm.status();
       let e; try { cm.DeviceBuffer.alloc(16); } catch (x) { e = x; }
       console.log(JSON.stringify({ reason: s.reason, name: e.name, why: e.reason, isErr: e instanceof cm.CudaUnavailableError }));`,
      { CUDA_MEMORY_ADDON: '/nonexistent/cuda_memory.node' },
    );
    expect(JSON.parse(out)).toEqual({ reason: 'ADDON_NOT_LOADED', name: 'CudaUnavailableError', why: 'ADDON_NOT_LOADED', isErr: true });
  });

  test('import (ESM) and require share one module, at every entry point', () => {
    for (const name of ENTRY_NAMES) {
      const first = Object.keys(require(entryFile(name)))[0];
      const out = execFileSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `import m, { ${first} } from '${name}'; import * as all from '${name}'; import { createRequire } from 'node:module';
           const r = createRequire(import.meta.url)('${name}');
           console.log(m === r, m.${first} === ${first} && r.${first} === ${first}, Object.keys(all).filter((k) => k !== 'default').sort().join() === Object.keys(r).sort().join())`,
        ],
        { cwd: root, encoding: 'utf8' },
      );
      expect([name, out.trim()]).toEqual([name, 'true true true']);
    }
  });

  test("the default import from CommonJS output (esbuild --format=cjs, as tsc's esModuleInterop reads it) is the module, at every entry point", () => {
    for (const name of ENTRY_NAMES) {
      const first = Object.keys(require(entryFile(name)))[0];
      const { outputFiles } = require('esbuild').buildSync({
        stdin: {
          contents: `import m, { ${first} } from '${name}'; console.log(m === require('${name}'), m.${first} === ${first})`,
          loader: 'ts',
        },
        bundle: true,
        format: 'cjs',
        platform: 'node',
        external: ['cuda-memory'],
        write: false,
      });
      expect([name, nodeEval(outputFiles[0].text).trim()]).toEqual([name, 'true true']);
    }
  });

  test('the native exports are exactly the declared ones', () => {
    const { native } = require('../../dist/binding/native');
    const { NATIVE_EXPORTS } = require('../../dist/binding/types');
    expect(Object.keys(native).sort()).toEqual([...NATIVE_EXPORTS].sort());
  });

  test('each native export is a function named as it is registered', () => {
    const { native } = require('../../dist/binding/native');
    const { NATIVE_EXPORTS } = require('../../dist/binding/types');
    expect(NATIVE_EXPORTS.filter((name) => typeof native[name] !== 'function' || native[name].name !== name)).toEqual([]);
  });

  test('each entry point exports exactly what its .d.ts declares', () => {
    const ts = require('typescript');
    for (const name of ENTRY_NAMES) {
      const file = entryFile(name).replace(/\.js$/, '.d.ts');
      const program = ts.createProgram([file], { skipLibCheck: true });
      const checker = program.getTypeChecker();
      const sym = checker.getSymbolAtLocation(program.getSourceFile(file));
      const declared = checker
        .getExportsOfModule(sym)
        .filter((s) => {
          const t = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
          return t.flags & (ts.SymbolFlags.Value | ts.SymbolFlags.Function | ts.SymbolFlags.Class);
        })
        .map((s) => s.getName())
        .sort();
      // `default` (the module itself) is there for CommonJS output's default import, not enumerable.
      const m = require(entryFile(name));
      const actual = [...Object.keys(m).filter((k) => k !== '__esModule'), ...(m.default === m ? ['default'] : [])].sort();
      expect([name, actual]).toEqual([name, declared]);
    }
  });

  test('a name is exported by one entry point only; the memory library holds none of bench, metrics or testing', () => {
    const where = new Map();
    for (const name of ENTRY_NAMES) for (const k of Object.keys(require(entryFile(name)))) where.set(k, [...(where.get(k) ?? []), name]);
    expect([...where].filter(([, at]) => at.length > 1)).toEqual([]);
    for (const k of [
      'runTransferBenchmark',
      'runDoctor',
      'parseGate',
      'summarize',
      'registerMetrics',
      'metricsText',
      'createLeakGate',
      'LeakError',
    ])
      expect([k, k in cm]).toEqual([k, false]);
  });

  test("TypeDoc documents exactly the package's entry points", () => {
    const typedoc = JSON.parse(fs.readFileSync(path.join(root, 'typedoc.json'), 'utf8'));
    const sources = ENTRY_NAMES.map((name) =>
      path
        .relative(root, entryFile(name))
        .replace(/^dist\//, 'lib/')
        .replace(/\.js$/, '.ts'),
    );
    expect([...typedoc.entryPoints].sort()).toEqual(sources.sort());
  });
});

// The variant built without a CUDA toolkit (npm run build:nocuda) and the cmake-js build.
// CI builds both and sets CUDA_MEMORY_REQUIRE_BUILDS=1, under which a missing build fails.
const requireBuilds = process.env.CUDA_MEMORY_REQUIRE_BUILDS === '1';
for (const [name, rel, expectBuiltWithCuda] of [
  ['the build without CUDA', 'build-nocuda/Release/cuda_memory.node', false],
  ['the cmake-js build', 'build-cmake/Release/cuda_memory.node', true],
]) {
  const file = path.join(root, rel);
  const present = fs.existsSync(file);
  const d = present || requireBuilds ? describe : describe.skip;
  d(
    `${name}${present ? '' : ` — skipped: ${rel} not built (npm run ${rel.startsWith('build-nocuda') ? 'build:nocuda' : 'build:cmake'})`}`,
    () => {
      test('loads and reports its status', () => {
        expect(fs.existsSync(file)).toBe(true);
        const out = nodeEval(
          `const cm = require('.'); const { addonPath } = require('./dist/binding/native'); const s = cm.status();
         let e; try { cm.PinnedBuffer.alloc(64); } catch (x) { e = x; }
         const a = cm.createAllocator({ simulate: { totalBytes: 2 ** 30 }, allowGrowth: true }); const b = a.alloc(1000);
         console.log(JSON.stringify({ addonPath, s, err: e ? e.name + ':' + e.reason : null, inUse: a.stats().bytesInUse }));`,
          { CUDA_MEMORY_ADDON: file },
        );
        const r = JSON.parse(out);
        expect(r.addonPath).toBe(file);
        expect(r.s.builtWithCuda).toBe(expectBuiltWithCuda);
        if (!expectBuiltWithCuda) {
          expect(r.s.reason).toBe('NOT_BUILT_WITH_CUDA');
          expect(r.err).toBe('CudaUnavailableError:NOT_BUILT_WITH_CUDA');
        }
        expect(r.inUse).toBe(1024);
      });
    },
  );
}

// A binary without CUDA (what a source build falls back to where its CUDA build fails) in a tree
// shaped like the installed package, beside the prebuilt binary with CUDA: it must not outrank it,
// and where it is what loads, status() says why it has no CUDA and what to run.
const noCudaBuild = path.join(root, 'build-nocuda', 'Release', 'cuda_memory.node');
const cudaBuild = path.join(root, 'build', 'Release', 'cuda_memory.node');
const cudaBuildHere = fs.existsSync(cudaBuild) && cm.status().builtWithCuda && require('../../dist/binding/native').addonPath === cudaBuild;
const haveBoth = fs.existsSync(noCudaBuild) && cudaBuildHere;
(haveBoth || requireBuilds ? describe : describe.skip)(
  `which binary loads, and what a binary without CUDA says${haveBoth ? '' : ' — skipped: needs build-nocuda/ (npm run build:nocuda) and build/Release built with CUDA'}`,
  () => {
    const { tempDir } = require('../helpers');
    // The package's files, a binary without CUDA as its source build, and optionally the prebuilt one.
    function tree(prebuilt) {
      const dir = tempDir('cuda-memory-loader-');
      fs.copyFileSync(path.join(root, 'package.json'), path.join(dir, 'package.json'));
      fs.cpSync(path.join(root, 'dist'), path.join(dir, 'dist'), { recursive: true });
      fs.cpSync(path.join(root, 'scripts', 'find-cuda.js'), path.join(dir, 'scripts', 'find-cuda.js'));
      fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
      fs.mkdirSync(path.join(dir, 'build', 'Release'), { recursive: true });
      fs.copyFileSync(noCudaBuild, path.join(dir, 'build', 'Release', 'cuda_memory.node'));
      if (prebuilt) {
        fs.mkdirSync(path.join(dir, 'prebuilds', 'linux-x64'), { recursive: true });
        fs.copyFileSync(cudaBuild, path.join(dir, 'prebuilds', 'linux-x64', 'cuda-memory.napi.glibc.node'));
      }
      // A toolkit as scripts/find-cuda.js recognises one.
      for (const f of ['include/cuda_runtime_api.h', 'lib64/libcudart_static.a']) {
        fs.mkdirSync(path.dirname(path.join(dir, 'toolkit', f)), { recursive: true });
        fs.writeFileSync(path.join(dir, 'toolkit', f), '');
      }
      return dir;
    }
    const statusOf = (dir) =>
      JSON.parse(
        execFileSync(process.execPath, ['-e', `console.log(JSON.stringify(require(${JSON.stringify(dir)}).status()))`], {
          encoding: 'utf8',
          env: { ...process.env, CUDA_MEMORY_ADDON: '', CUDA_PATH: path.join(dir, 'toolkit') },
        }),
      );

    test('a source build without CUDA yields to the prebuilt binary with CUDA', () => {
      const dir = tree(true);
      const s = statusOf(dir);
      expect({ kind: s.binary.kind, builtWithCuda: s.builtWithCuda }).toEqual({ kind: 'prebuilt', builtWithCuda: true });
      expect(s.binary.path).toBe(path.join(dir, 'prebuilds', 'linux-x64', 'cuda-memory.napi.glibc.node'));
    });

    test('where it is the only binary, it loads, and its message names it, the toolkit found and the command to run', () => {
      const dir = tree(false);
      const s = statusOf(dir);
      expect({ kind: s.binary.kind, reason: s.reason }).toEqual({ kind: 'no-cuda', reason: 'NOT_BUILT_WITH_CUDA' });
      expect(s.message).toBe(
        `the addon in use (${path.join(dir, 'build', 'Release', 'cuda_memory.node')}) was built without CUDA, though a CUDA toolkit is here (${path.join(dir, 'toolkit')}): ` +
          "CUDA_MEMORY_NO_CUDA was set when it was built, or its CUDA build failed. Run `npx cuda-memory build --from-source` to build it with CUDA (it shows the compiler's errors if that fails)",
      );
    });
  },
);

test('a binary without CUDA where no toolkit is found: the message says to install one', () => {
  const { notBuiltWithCudaMessage } = require('../../dist/binding/native');
  const { tempDir } = require('../helpers');
  const dir = tempDir('cuda-memory-no-toolkit-');
  fs.mkdirSync(path.join(dir, 'scripts'));
  fs.writeFileSync(path.join(dir, 'scripts', 'find-cuda.js'), "module.exports = { findCuda: () => '' };");
  expect(notBuiltWithCudaMessage('/x/cuda_memory.node', dir)).toBe(
    'the addon in use (/x/cuda_memory.node) was built without CUDA, and no CUDA toolkit is found (CUDA_PATH, CUDA_HOME, /usr/local/cuda, nvcc on the PATH). ' +
      'Install one and run `npx cuda-memory build --from-source`, or use a linux-x64 host with glibc 2.34 or newer, where the prebuilt binary loads',
  );
});
