'use strict';
// binding.gyp and CMakeLists.txt build in a folder whose path has a space (a clone in
// "~/my projects/", a package installed under it). The interposer is the target that names a path
// of the tree in its link line (its export list): it is built alone, node-gyp's way and cmake-js's,
// from a copy of the files the build reads, so the check takes seconds, not a whole build. The whole
// addon is built in such a path by scripts/check-package.sh (`npx cuda-memory build --from-source`).
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { tempDir } = require('../helpers');
const { localNodeHeaders } = require('../../scripts/build-addon');

const repo = path.join(__dirname, '..', '..');
const onPath = (cmd) => spawnSync('sh', ['-c', 'command -v "$0"', cmd], { stdio: 'ignore' }).status === 0;

// The files a build reads, copied into "<tmp>/with space/", with the clone's node_modules.
function spacedCopy() {
  const dir = path.join(tempDir('cuda-memory-build-'), 'with space');
  fs.mkdirSync(path.join(dir, 'scripts'), { recursive: true });
  for (const f of ['binding.gyp', 'CMakeLists.txt', 'package.json', 'scripts/find-cuda.js'])
    fs.copyFileSync(path.join(repo, f), path.join(dir, f));
  fs.cpSync(path.join(repo, 'native'), path.join(dir, 'native'), {
    recursive: true,
    filter: (p) => !p.startsWith(path.join(repo, 'native', 'core', 'test')),
  });
  fs.symlinkSync(path.join(repo, 'node_modules'), path.join(dir, 'node_modules'));
  return dir;
}

// Runs a build step in dir; its output is the failure's message.
function step(dir, cmd, args) {
  const r = spawnSync(cmd, args, { cwd: dir, encoding: 'utf8', timeout: 300000 });
  return { ok: r.status === 0, output: `${cmd} ${args.join(' ')}: exit ${r.status}\n${r.stdout}${r.stderr}`.slice(-4000) };
}

// node-gyp without Node's headers on the machine downloads them; a machine that cannot reach
// nodejs.org (the GPU machine, whose Node runtime is a bare copy) skips the node-gyp leg.
const headers = localNodeHeaders();

describe('a build in a folder whose path has a space', () => {
  (headers ? test : test.skip)(
    `binding.gyp (node-gyp): the interposer links${headers ? '' : ' — skipped: no Node headers here (set npm_config_nodedir), and node-gyp would download them'}`,
    () => {
      const dir = spacedCopy();
      const gyp = path.join(repo, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
      const configure = step(dir, process.execPath, [gyp, 'configure', `--nodedir=${headers}`]);
      expect(configure).toEqual(expect.objectContaining({ ok: true }));
      const make = step(dir, 'make', ['-C', 'build', '-j2', 'cuda_memory_preload']);
      expect(make).toEqual(expect.objectContaining({ ok: true }));
      expect(fs.existsSync(path.join(dir, 'build', 'Release', 'cuda_memory_preload.so'))).toBe(true);
    },
  );

  (onPath('cmake') ? test : test.skip)(
    `CMakeLists.txt (cmake-js): the interposer links${onPath('cmake') ? '' : ' — skipped: cmake is not installed'}`,
    () => {
      const dir = spacedCopy();
      const cmakeJs = path.join(repo, 'node_modules', 'cmake-js', 'bin', 'cmake-js');
      const r = step(dir, process.execPath, [cmakeJs, 'compile', '--out', 'build-cmake', '--target', 'cuda_memory_preload']);
      expect(r).toEqual(expect.objectContaining({ ok: true }));
      expect(fs.existsSync(path.join(dir, 'build-cmake', 'Release', 'cuda_memory_preload.so'))).toBe(true);
    },
  );
});
