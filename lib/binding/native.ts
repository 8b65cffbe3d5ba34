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
  // node-gyp-build picks build/Release first, where there is one; the prebuilt binary is listed
  // after it too, for a build/Release without CUDA to yield to (load()).
  for (const picked of [nodeGypBuildPath(), prebuiltPath()]) if (picked && !out.includes(picked)) out.push(picked);
  return out;
}

/**
 * The prebuilt binary under prebuilds/ that fits this platform, chosen by node-gyp-build's own
 * rules (platform and arch folder, then Node-API and libc tags), whether or not a source build is
 * there too; null if none fits.
 */
export function prebuiltPath(root = packageRoot): string | null {
  interface Tags {
    file: string;
  }
  interface GypBuild {
    parseTuple(name: string): { name: string } | undefined;
    matchTuple(platform: string, arch: string): (t: unknown) => boolean;
    compareTuples(a: unknown, b: unknown): number;
    parseTags(file: string): Tags | undefined;
    matchTags(runtime: string, abi: string): (t: Tags | undefined) => boolean;
    compareTags(runtime: string): (a: unknown, b: unknown) => number;
  }
  try {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    const g = require('node-gyp-build') as GypBuild;
    const dir = path.join(root, 'prebuilds');
    const tuple = fs.readdirSync(dir).map(g.parseTuple).filter(g.matchTuple(process.platform, process.arch)).sort(g.compareTuples)[0];
    if (!tuple) return null;
    const folder = path.join(dir, tuple.name);
    const tags = fs.readdirSync(folder).map(g.parseTags).filter(g.matchTags('node', process.versions.modules)) as Tags[];
    const winner = tags.sort(g.compareTags('node'))[0];
    return winner ? path.join(folder, winner.file) : null;
  } catch {
    return null;
  }
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

// The first candidate that loads, except that a binary built without CUDA (a source build's
// fallback where the CUDA build failed, or one made with CUDA_MEMORY_NO_CUDA) yields to a later one
// built with CUDA, the prebuilt binary say: it can do nothing the other cannot. It is used only
// where none with CUDA loads. CUDA_MEMORY_ADDON names the one file to load.
function load(): { binding: NativeBinding; path: string | null } {
  const errors: string[] = [];
  let withoutCuda: { binding: NativeBinding; path: string } | null = null;
  for (const file of candidates()) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-var-requires
      const binding = require(file) as NativeBinding;
      binding.init({ CudaMemoryError, CudaError, OutOfMemoryError, CudaUnavailableError, InterprocessError }, fileCodeTable(), threadId);
      if (binding.status().builtWithCuda) return { binding, path: file };
      withoutCuda ??= { binding, path: file };
    } catch (e) {
      errors.push(`${file}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  if (withoutCuda) return withoutCuda;
  const bundled = bundledMessage();
  if (bundled) return { binding: unloaded(bundled), path: null };
  return {
    binding: unloaded(
      `the native addon could not be loaded; run \`npx cuda-memory build\` to build it from source (docs/troubleshooting.md): ${errors.join('; ')}`,
    ),
    path: null,
  };
}

/**
 * Why a binary built without CUDA cannot use the GPU, and what to run: where a CUDA toolkit is
 * found now (scripts/find-cuda.js), the binary was built without it on purpose
 * (CUDA_MEMORY_NO_CUDA) or because its CUDA build failed, and a source build with it is the fix;
 * else the toolkit is what is missing.
 */
export function notBuiltWithCudaMessage(file: string | null, root = packageRoot): string {
  let toolkit = '';
  try {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    const { findCuda } = require(path.join(root, 'scripts', 'find-cuda.js')) as { findCuda(env: NodeJS.ProcessEnv): string };
    toolkit = findCuda({ ...process.env, CUDA_MEMORY_NO_CUDA: '' });
  } catch {
    // no scripts/ beside the code (a bundle): the toolkit is not known
  }
  const binary = `the addon in use (${file ?? 'unknown'}) was built without CUDA`;
  return toolkit
    ? `${binary}, though a CUDA toolkit is here (${toolkit}): CUDA_MEMORY_NO_CUDA was set when it was built, or its CUDA build failed. ` +
        "Run `npx cuda-memory build --from-source` to build it with CUDA (it shows the compiler's errors if that fails)"
    : `${binary}, and no CUDA toolkit is found (CUDA_PATH, CUDA_HOME, /usr/local/cuda, nvcc on the PATH). ` +
        'Install one and run `npx cuda-memory build --from-source`, or use a linux-x64 host with glibc 2.34 or newer, where the prebuilt binary loads';
}

const loaded = load();
/** The loaded addon (or the stand-in). */
export const native: NativeBinding = loaded.binding;
/** Where the addon was loaded from, or null. */
export const addonPath: string | null = loaded.path;
