/**
 * Loads the addon. Loading never throws: if the addon is missing or fails to load, a stand-in
 * reports why through status(), and every GPU call throws CudaUnavailableError.
 */
import * as fs from 'fs';
import * as path from 'path';
import { threadId } from 'worker_threads';
import { CudaError, CudaMemoryError, CudaUnavailableError, InterprocessError, OutOfMemoryError } from '../base/errors';
import { fileCodeTable } from '../base/files';
import { NATIVE_EXPORTS } from './types';
import type { NativeBinding } from './types';

/** The package's root folder (holds build/, prebuilds/ and package.json). */
// An ES module bundle has no __dirname: the root is then unknown, which bundledMessage() reports.
export const packageRoot = typeof __dirname === 'string' ? path.join(__dirname, '..', '..') : '(an ES module bundle)';

// Where a binary may be, in order: a forced path; a source build (made by `npm install` when no
// prebuilt binary fitted, or by `npm run build`); then the prebuilt binary for this platform,
// found as node-gyp-build finds it (prebuilds/<platform>-<arch>/, Node-API and libc tags).
function candidates(): string[] {
  const env = process.env.CUDA_MEMORY_ADDON;
  if (env) return [path.resolve(env)];
  const out = [
    path.join(packageRoot, 'build', 'Release', 'cuda_memory.node'),
    path.join(packageRoot, 'build-cmake', 'Release', 'cuda_memory.node'),
    path.join(packageRoot, 'build', 'Debug', 'cuda_memory.node'),
  ];
  const picked = nodeGypBuildPath();
  if (picked && !out.includes(picked)) out.push(picked);
  return out;
}

/** The package's version (from its package.json), or `unknown` where that cannot be read. */
export function packageVersion(): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(packageRoot, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/**
 * The binary node-gyp-build picks for this package: a source build if there is one, else the
 * prebuilt binary under prebuilds/ that fits this platform (platform, arch, Node-API, libc
 * tags); null if neither.
 */
export function nodeGypBuildPath(): string | null {
  try {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    const gypBuild = require('node-gyp-build') as { path(dir: string): string };
    return gypBuild.path(packageRoot);
  } catch {
    return null;
  }
}

/** Which binary a path is: prebuilt (shipped in the package), or built on this machine. */
export function binaryKind(file: string | null, builtWithCuda: boolean): 'prebuilt' | 'source' | 'no-cuda' | 'none' {
  if (!file) return 'none';
  if (!builtWithCuda) return 'no-cuda';
  return path.relative(packageRoot, file).split(path.sep)[0] === 'prebuilds' ? 'prebuilt' : 'source';
}

function unloaded(reason: string): NativeBinding {
  const unavailable = () => {
    throw new CudaUnavailableError('ADDON_NOT_LOADED', reason);
  };
  const stub: Record<string, unknown> = {};
  for (const name of NATIVE_EXPORTS) stub[name] = unavailable;
  stub.init = () => undefined;
  stub.status = () => ({
    available: false,
    reason: 'ADDON_NOT_LOADED',
    message: reason,
    deviceCount: 0,
    driverVersion: 0,
    runtimeVersion: 0,
    builtWithCuda: false,
  });
  stub.liveCount = () => 0;
  stub.liveSummary = () => [];
  stub.liveElsewhere = () => [];
  stub.leakGateHere = () => undefined;
  stub.allocatorsLive = () => [];
  stub.nvmlState = () => null;
  return stub as unknown as NativeBinding;
}

/**
 * A bundler (esbuild, webpack, rollup) that inlined this package moves its code away from its
 * files: the addon, prebuilds/ and package.json are no longer beside it. Returns what happened and
 * how to fix it, or null when the package is where it should be.
 */
export function bundledMessage(root = packageRoot): string | null {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { name?: string };
    if (pkg.name === 'cuda-memory') return null;
  } catch {
    // no package.json there: the code was moved
  }
  return (
    `cuda-memory's code runs from ${root}, which is not the package's folder: it was bundled, and a bundle cannot ` +
    'carry the native addon. Mark cuda-memory as external in the bundler (esbuild: --external:cuda-memory; ' +
    "webpack: externals: { 'cuda-memory': 'commonjs cuda-memory' }; rollup: external: ['cuda-memory']) and install it " +
    'beside the bundle (see docs/install.md, "Bundlers").'
  );
}

function load(): { binding: NativeBinding; path: string | null } {
  const errors: string[] = [];
  for (const file of candidates()) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-var-requires
      const binding = require(file) as NativeBinding;
      binding.init({ CudaMemoryError, CudaError, OutOfMemoryError, CudaUnavailableError, InterprocessError }, fileCodeTable(), threadId);
      return { binding, path: file };
    } catch (e) {
      errors.push(`${file}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  const bundled = bundledMessage();
  if (bundled) return { binding: unloaded(bundled), path: null };
  return {
    binding: unloaded(
      `the native addon could not be loaded; run \`npx cuda-memory build\` to build it from source (docs/troubleshooting.md): ${errors.join('; ')}`,
    ),
    path: null,
  };
}

const loaded = load();
/** The loaded addon (or the stand-in). */
export const native: NativeBinding = loaded.binding;
/** Where the addon was loaded from, or null. */
export const addonPath: string | null = loaded.path;
