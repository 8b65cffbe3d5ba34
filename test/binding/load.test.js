'use strict';
const path = require('path');
const fs = require('fs');
const { execFileSync } = require('child_process');
const { cm } = require('../helpers');

const root = path.join(__dirname, '..', '..');

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

  test('import (ESM) and require share one module', () => {
    const out = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "import cm, { copy, status } from 'cuda-memory'; import { createRequire } from 'node:module'; const r = createRequire(import.meta.url)('cuda-memory'); console.log(cm.copy === copy && r.copy === copy, typeof status().available)",
      ],
      { cwd: root, encoding: 'utf8' },
    );
    expect(out.trim()).toBe('true boolean');
  });

  test("the default import from CommonJS output (esbuild --format=cjs, as tsc's esModuleInterop reads it) is the package", () => {
    const { outputFiles } = require('esbuild').buildSync({
      stdin: {
        contents: "import cm, { copy } from 'cuda-memory'; console.log(cm === require('cuda-memory'), cm.copy === copy)",
        loader: 'ts',
      },
      bundle: true,
      format: 'cjs',
      platform: 'node',
      external: ['cuda-memory'],
      write: false,
    });
    expect(nodeEval(outputFiles[0].text).trim()).toBe('true true');
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

  test('the module exports exactly what dist/index.d.ts declares', () => {
    const ts = require('typescript');
    const file = path.join(root, 'dist', 'index.d.ts');
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
    // `default` (the package itself) is there for CommonJS output's default import, not enumerable.
    const actual = [...Object.keys(cm).filter((k) => k !== '__esModule'), ...(cm.default === cm ? ['default'] : [])].sort();
    expect(actual).toEqual(declared);
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
