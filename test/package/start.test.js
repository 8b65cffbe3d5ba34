'use strict';
// `npm start` and `npm test` on a fresh clone: scripts/build-missing.js builds only what is missing
// and says why, or which step cannot run and what to install; scripts/start.js then runs the main
// job, which without a GPU is the simulated allocator demo, saying so.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { gpu, st } = require('../helpers');

const repo = path.join(__dirname, '..', '..');

// A tree shaped like a clone, holding the build scripts and stand-ins for what they look at.
function fakeClone() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-start-'));
  const put = (rel, text = '') => {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.writeFileSync(path.join(dir, rel), text);
  };
  for (const f of ['build-missing.js', 'build-addon.js', 'find-cuda.js', 'write-esm.js'])
    put(`scripts/${f}`, fs.readFileSync(path.join(repo, 'scripts', f)));
  for (const f of ['node_modules/typescript/package.json', 'lib/index.ts', 'tsconfig.json', 'native/addon.cc', 'binding.gyp']) put(f);
  return { dir, put };
}

// Runs the fake clone's build-missing.js.
function buildMissing(dir, env = {}) {
  return spawnSync(process.execPath, [path.join(dir, 'scripts', 'build-missing.js')], {
    cwd: dir,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60000,
  });
}

const backdate = (dir, rels) => {
  const old = new Date(Date.now() - 3600 * 1000);
  for (const rel of rels) fs.utimesSync(path.join(dir, rel), old, old);
};

describe('scripts/build-missing.js', () => {
  let clone;
  beforeEach(() => {
    clone = fakeClone();
  });
  afterEach(() => fs.rmSync(clone.dir, { recursive: true, force: true }));

  test('builds nothing when dist/ and the addon are newer than their sources', () => {
    backdate(clone.dir, ['lib/index.ts', 'tsconfig.json', 'scripts/write-esm.js', 'native/addon.cc', 'binding.gyp']);
    clone.put('dist/index.mjs');
    clone.put('build/Release/cuda_memory.node');
    const r = buildMissing(clone.dir);
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    expect(r.stdout).toBe('cuda-memory: dist/ and build/Release/cuda_memory.node are up to date; nothing to build\n');
  });

  test('a missing addon that cannot be compiled: says which step and what to install, once, and exits 1', () => {
    backdate(clone.dir, ['lib/index.ts', 'tsconfig.json', 'scripts/write-esm.js']);
    clone.put('dist/index.mjs');
    const r = buildMissing(clone.dir, { CXX: path.join(clone.dir, 'no-such-compiler') });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    const lines = r.stderr.trim().split('\n');
    expect(lines[0]).toMatch(
      /^cuda-memory: step 2 of 2, the addon: build\/Release\/cuda_memory.node is missing, but the addon cannot be compiled here: a C\+\+ compiler \(.*no-such-compiler\) not found\. Install them \(Debian\/Ubuntu: apt-get install -y g\+\+ make python3/,
    );
    expect(lines.slice(1)).toEqual(['cuda-memory: step 2 of 2, the addon failed: no addon could be built (the reason above)']);
    expect(r.stderr.match(/apt-get/g)).toHaveLength(1);
  });

  test('without the development dependencies: says to run npm ci, and exits 1', () => {
    fs.rmSync(path.join(clone.dir, 'node_modules'), { recursive: true });
    const r = buildMissing(clone.dir);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(
      /^cuda-memory: step 1 of 2, the TypeScript failed: node_modules\/ lacks the development dependencies; run `npm ci` first/,
    );
  });

  test('an addon older than a native source is named as the reason to rebuild', () => {
    backdate(clone.dir, ['lib/index.ts', 'tsconfig.json', 'scripts/write-esm.js', 'binding.gyp']);
    clone.put('dist/index.mjs');
    clone.put('build/Release/cuda_memory.node');
    backdate(clone.dir, ['build/Release/cuda_memory.node']);
    const r = buildMissing(clone.dir, { CXX: path.join(clone.dir, 'no-such-compiler') });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/step 2 of 2, the addon: build\/Release\/cuda_memory.node is older than native\/.*not found/);
  });
});

(gpu ? describe.skip : describe)(
  `npm start without a GPU${gpu ? ' — skipped: a GPU is usable here, where npm start runs the transfer benchmark' : ''}`,
  () => {
    test('runs the simulated allocator demo and says why', () => {
      const r = spawnSync(process.execPath, [path.join(repo, 'scripts', 'start.js')], { cwd: repo, encoding: 'utf8', timeout: 300000 });
      expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
      expect(r.stdout).toContain(`cuda-memory: no usable GPU here (${st.reason}: ${st.message}), so not the transfer benchmark`);
      expect(r.stdout).toContain('simulated device: allowGrowth, limit 512 MiB');
      expect(r.stdout).toMatch(/simulated device: limit 8 GiB \(memoryFraction 0.1/);
    });
  },
);

const noCudaBuild = path.join(repo, 'build-nocuda', 'Release', 'cuda_memory.node');
(fs.existsSync(noCudaBuild) ? describe : describe.skip)(
  `npm start with a binary built without CUDA${fs.existsSync(noCudaBuild) ? '' : ' — skipped: build-nocuda/ is not built (npm run build:nocuda)'}`,
  () => {
    test('says the addon in use cannot use a GPU, naming it, rather than that there is no GPU', () => {
      const r = spawnSync(process.execPath, [path.join(repo, 'scripts', 'start.js')], {
        cwd: repo,
        encoding: 'utf8',
        timeout: 300000,
        env: { ...process.env, CUDA_MEMORY_ADDON: noCudaBuild },
      });
      expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
      expect(r.stdout).toContain(
        `cuda-memory: the addon in use cannot use a GPU (NOT_BUILT_WITH_CUDA: the addon in use (${noCudaBuild}) was built without CUDA`,
      );
      expect(r.stdout).not.toContain('no usable GPU here');
    });
  },
);
