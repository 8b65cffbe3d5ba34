'use strict';
// scripts/build-addon.js (`npx cuda-memory build`, and the addon step of `npm start`): a failed
// build never displaces a binary that works, and its last line says which binary the package
// loads. In a tree shaped like the package: its build scripts, dist/, and real binaries copied
// from this checkout as the prebuilt one or a previous source build; node-gyp is a stand-in
// (npm_config_node_gyp) whose CUDA build fails after removing build/ (as node-gyp rebuild does)
// and linking the addon alone, as a build whose interposer fails to link leaves it.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { root, tempDir } = require('../helpers');

const repo = path.join(__dirname, '..', '..');
const cudaBuild = path.join(repo, 'build', 'Release', 'cuda_memory.node');
const haveCudaBuild =
  fs.existsSync(cudaBuild) &&
  spawnSync(process.execPath, ['-e', `process.exit(require(${JSON.stringify(repo)}).status().builtWithCuda ? 0 : 1)`]).status === 0;
const prebuiltRel = path.join('prebuilds', 'linux-x64', 'cuda-memory.napi.glibc.node');

const fakeNodeGyp = `'use strict';
const fs = require('fs');
const path = require('path');
const build = path.join(process.cwd(), 'build');
fs.rmSync(build, { recursive: true, force: true });
if (process.env.CUDA_MEMORY_NO_CUDA === '1') {
  fs.writeFileSync(path.join(process.cwd(), 'no-cuda-build-attempted'), '');
  fs.mkdirSync(path.join(build, 'Release'), { recursive: true });
  fs.writeFileSync(path.join(build, 'Release', 'cuda_memory.node'), 'the variant without CUDA (a stand-in)');
  console.log('  CXX(target) Release/obj.target/cuda_memory/native/addon.o');
  process.exit(0);
}
console.log('  CXX(target) Release/obj.target/cuda_memory/native/addon.o');
fs.mkdirSync(path.join(build, 'Release'), { recursive: true });
fs.copyFileSync(${JSON.stringify(cudaBuild)}, path.join(build, 'Release', 'cuda_memory.node'));
console.error('native/allocator/preload/interpose.cc: error: the stand-in CUDA build fails here');
process.exit(1);
`;

// A tree shaped like the installed package (or a clone): with `prebuilt`, the prebuilt binary;
// with `previous`, a source build with CUDA in build/.
function packageTree({ prebuilt = false, previous = false } = {}) {
  const dir = tempDir('cuda-memory-build-addon-');
  const put = (rel, text = '') => {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.writeFileSync(path.join(dir, rel), text);
  };
  for (const f of ['build-addon.js', 'find-cuda.js']) put(`scripts/${f}`, fs.readFileSync(path.join(repo, 'scripts', f)));
  put('package.json', fs.readFileSync(path.join(root, 'package.json')));
  put('binding.gyp', '"native/addon.cc"');
  put('node-gyp.js', fakeNodeGyp);
  // A toolkit as find-cuda.js recognises one, so that the build is a CUDA build on any machine.
  put('toolkit/include/cuda_runtime_api.h');
  put('toolkit/lib64/libcudart_static.a');
  fs.cpSync(path.join(root, 'dist'), path.join(dir, 'dist'), { recursive: true });
  fs.symlinkSync(path.join(repo, 'node_modules'), path.join(dir, 'node_modules'));
  if (prebuilt) {
    fs.mkdirSync(path.dirname(path.join(dir, prebuiltRel)), { recursive: true });
    fs.copyFileSync(cudaBuild, path.join(dir, prebuiltRel));
  }
  if (previous) {
    put('build/Makefile', 'the previous configuration');
    fs.mkdirSync(path.join(dir, 'build', 'Release'));
    fs.copyFileSync(cudaBuild, path.join(dir, 'build', 'Release', 'cuda_memory.node'));
  }
  return dir;
}

function buildAddon(dir, ...args) {
  const r = spawnSync(process.execPath, [path.join(dir, 'scripts', 'build-addon.js'), ...args], {
    cwd: dir,
    encoding: 'utf8',
    timeout: 120000,
    env: {
      ...process.env,
      npm_config_node_gyp: path.join(dir, 'node-gyp.js'),
      CUDA_PATH: path.join(dir, 'toolkit'),
      CUDA_MEMORY_NO_CUDA: '',
      CUDA_MEMORY_ADDON: '',
      CUDA_MEMORY_BUILD_FROM_SOURCE: '',
    },
  });
  const lines = r.stdout.trim().split('\n');
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, last: lines[lines.length - 1] };
}

// The binary the tree's package loads, as a program sees it.
function loadedBy(dir) {
  const r = spawnSync(process.execPath, ['-e', `console.log(JSON.stringify(require(${JSON.stringify(dir)}).status().binary))`], {
    encoding: 'utf8',
    env: { ...process.env, CUDA_MEMORY_ADDON: '' },
  });
  const binary = JSON.parse(r.stdout);
  return { kind: binary.kind, path: binary.path && path.relative(dir, binary.path) };
}

(haveCudaBuild ? describe : describe.skip)(
  `scripts/build-addon.js: a failed build never displaces a working binary${haveCudaBuild ? '' : ' — skipped: build/Release/cuda_memory.node is not a build with CUDA here (npm start with a CUDA toolkit makes one)'}`,
  () => {
    test('a failed CUDA build leaves the prebuilt binary in use: no variant without CUDA, nothing left in build/, and it says so', () => {
      const dir = packageTree({ prebuilt: true });
      const r = buildAddon(dir, '--from-source');
      expect(r.status).toBe(1);
      expect(r.stderr).toContain('the stand-in CUDA build fails here');
      expect(fs.existsSync(path.join(dir, 'no-cuda-build-attempted'))).toBe(false);
      expect(fs.existsSync(path.join(dir, 'build'))).toBe(false);
      expect(r.last).toMatch(
        /^cuda-memory: the CUDA build failed \(its last lines above\) and nothing was replaced: the package loads prebuilds\/linux-x64\/cuda-memory\.napi\.glibc\.node, built with CUDA \(status: /,
      );
      expect(loadedBy(dir)).toEqual({ kind: 'prebuilt', path: prebuiltRel });
    });

    test('a failed rebuild puts back the source build that was in build/', () => {
      const dir = packageTree({ previous: true });
      const r = buildAddon(dir, '--from-source');
      expect(r.status).toBe(1);
      expect(fs.existsSync(path.join(dir, 'no-cuda-build-attempted'))).toBe(false);
      expect(fs.readFileSync(path.join(dir, 'build', 'Makefile'), 'utf8')).toBe('the previous configuration');
      expect(fs.existsSync(path.join(dir, 'build-previous'))).toBe(false);
      expect(r.last).toMatch(
        /^cuda-memory: the CUDA build failed \(its last lines above\) and nothing was replaced: the package loads build\/Release\/cuda_memory\.node, built with CUDA/,
      );
      expect(loadedBy(dir)).toEqual({ kind: 'source', path: path.join('build', 'Release', 'cuda_memory.node') });
    });

    test('where no binary with CUDA loads, the variant without CUDA is built, and the last lines say why and what loads', () => {
      const dir = packageTree();
      const r = buildAddon(dir);
      expect(r.status).toBe(0);
      expect(fs.existsSync(path.join(dir, 'no-cuda-build-attempted'))).toBe(true);
      expect(r.stdout).toContain(
        'cuda-memory: the CUDA build failed (its last lines above) and no binary with CUDA loads here; building the variant without CUDA instead',
      );
      // (The stand-in variant is no real binary, so the package then loads none.)
      expect(r.last).toMatch(/^cuda-memory: built the variant without CUDA because the CUDA build failed; the package loads no binary/);
    });

    test('without --from-source, a source build with CUDA that loads is named as what the package loads, and nothing is built', () => {
      const dir = packageTree({ prebuilt: true, previous: true });
      const r = buildAddon(dir);
      expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
      expect(r.stdout).toMatch(
        /^cuda-memory: nothing to build: the package loads build\/Release\/cuda_memory\.node, built with CUDA \(status: [^)]+\)\n$/,
      );
    });
  },
);
