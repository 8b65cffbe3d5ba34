/**
 * Loads the addon. Loading never throws: if the addon is missing or fails to load, a stand-in
 * reports why through status(), and every GPU call throws CudaUnavailableError.
 */
import * as fs from 'fs';
import * as path from 'path';
import { CudaError, CudaMemoryError, CudaUnavailableError, InterprocessError, OutOfMemoryError } from '../base/errors';
import type { LiveBufferRow, NvmlDeviceState, PeerLink, StagingPlacement, StagingSettings } from '../base/types';

/** The native exports; `test/binding/load.test.js` checks this list against the addon. */
export interface NativeBinding {
  init(classes: object): void;
  status(): {
    available: boolean;
    reason: string | null;
    message: string;
    deviceCount: number;
    driverVersion: number;
    runtimeVersion: number;
    builtWithCuda: boolean;
  };
  devices(): any[];
  memGetInfo(device: number): { free: number; total: number };
  /** NVML's compute processes on the GPU of this uuid; null where NVML cannot answer. */
  deviceProcesses(uuid: string): { pid: number; usedBytes: number | null }[] | null;
  deviceAlloc(bytes: number, device: number): number;
  pinnedAlloc(bytes: number, flags: number, device: number): [number, ArrayBuffer];
  registerHost(view: ArrayBufferView, flags: number, device: number): number;
  free(handle: number): boolean;
  /** free() after the work queued on `stream` (in its order, for a kind freed in stream order). */
  freeOn(handle: number, stream: unknown): boolean;
  handleInfo(handle: number): {
    address?: number;
    devicePointer?: number | null;
    released: boolean;
    simulated?: boolean;
    numaNode?: number;
  };
  liveCount(): number;
  /** The live buffers by kind, device and simulated-ness (for leak checks). */
  liveSummary(): LiveBufferRow[];
  /** The open allocators ('allocator') and group members ('group') by device, with pool bytes. */
  allocatorsLive(): LiveBufferRow[];
  /** A cudaMalloc no handle knows of (leak checks' tests); freed only by rawDeviceFree. */
  rawDeviceAlloc(bytes: number, device: number, simulated: boolean, where: string, listed: boolean): number;
  rawDeviceFree(address: number): boolean;
  /** What NVML says of a device now, or null where it does not know it. */
  nvmlState(pciBusId: string): NvmlDeviceState | null;
  copy(dst: unknown, dstOffset: number, src: unknown, srcOffset: number, n: number, strategy?: string, stream?: unknown): void;
  /** The memory copyHandles() reads its three numbers from (see copy() in lib/transfer/copy.ts). */
  copyArgs(): ArrayBuffer;
  /** copy() of byteLength bytes between the two handles written into copyArgs(), from offset 0. */
  copyHandles(): void;
  copyAsync(
    dst: unknown,
    dstOffset: number,
    src: unknown,
    srcOffset: number,
    n: number,
    strategy?: string,
    stream?: unknown,
  ): Promise<void>;
  memset(target: unknown, offset: number, n: number, value: number): void;
  configureStaging(options?: object): StagingSettings;
  streamCreate(device: number, nonBlocking: boolean): unknown;
  streamSynchronize(s: unknown): void;
  streamQuery(s: unknown): boolean;
  streamDestroy(s: unknown): boolean;
  eventCreate(device: number, timing: boolean): unknown;
  eventRecord(e: unknown, s?: unknown): void;
  eventSynchronize(e: unknown): void;
  eventQuery(e: unknown): boolean;
  eventElapsed(a: unknown, b: unknown): number;
  eventDestroy(e: unknown): boolean;
  createAllocator(options: object): unknown;
  /** `stream`: the async backend's; a bfc block is usable on any stream at once. */
  allocatorAlloc(a: unknown, bytes: number, alignment?: number, stream?: unknown): number;
  allocatorStats(a: unknown): any;
  allocatorRegions(a: unknown): any[];
  allocatorInfo(a: unknown): any;
  allocatorResetPeak(a: unknown): void;
  allocatorResetAccumulated(a: unknown): void;
  allocatorSetFraction(a: unknown, fraction: number): number;
  allocatorEmptyCache(a: unknown): number;
  allocatorClose(a: unknown, force: boolean): number;
  allocatorRecord(a: unknown, maxEvents: number | null): void;
  allocatorTrace(a: unknown): {
    action: Uint8Array;
    time: Float64Array;
    id: Float64Array;
    requested: Float64Array;
    size: Float64Array;
    region: Float64Array;
    offset: Float64Array;
    dropped: number;
  };
  allocatorSnapshot(
    a: unknown,
  ): { address: number; size: number; blocks: { offset: number; size: number; requested: number; id: number; inUse: boolean }[] }[];
  blockId(handle: number): number;
  timeCopy(dst: unknown, src: unknown, bytes: number, warmup: number, iterations: number, timing: string, strategy?: string): Float64Array;
  timeBidirectional(
    a: unknown,
    b: unknown,
    c: unknown,
    d: unknown,
    bytes: number,
    warmup: number,
    iterations: number,
    timing: string,
    strategy?: string,
  ): Float64Array;
  timeRawPinned(bytes: number, warmup: number, iterations: number, direction: string, device: number): Float64Array;
  timeHostCopy(pageable: Uint8Array, pinned: number, bytes: number, warmup: number, iterations: number, direction: string): Float64Array;
  timeRawAlloc(kind: string, bytes: number, iterations: number, device: number): Float64Array;
  timeHostRegister(view: ArrayBufferView, iterations: number): Float64Array;
  groupPath(dir: string, name: string, device: string): string;
  groupRead(path: string, lockTimeoutMs: number): any;
  ipcExport(handle: number, dir: string, lockTimeoutMs: number): any;
  ipcImport(descriptor: object, dir: string, device: number, lockTimeoutMs: number): [number, number];
  ipcImporters(handle: number): number[];
  ipcWithdraw(handle: number, force: boolean): number[];
  ipcImportForeign(
    handle: string,
    offset: number,
    byteLength: number,
    device: string,
    wanted: number,
    allocationBytes: number,
  ): [number, number, number];
  allocationBytesFrom(handle: number): number;
  platformLimits(root: string, env: Record<string, string>, devices: { index: number; pciBusId?: string; uuid?: string }[]): any;
  sharedHostCreate(path: string, bytes: number, device: number): [number, ArrayBuffer];
  sharedHostOpen(path: string, device: number): [number, ArrayBuffer];
  sharedHostUnlink(path: string): boolean;
  timeTogether(
    jobs: { dst: unknown; src: unknown; bytes: number; timing: 'events' | 'clock'; strategy?: string }[],
    warmup: number,
    iterations: number,
  ): { seconds: Float64Array[]; wall: Float64Array };
  timePeerLatency(dst: number, src: number, count: number, warmup: number, iterations: number): Float64Array;
  stagingPlacement(device: number): StagingPlacement;
  peerAccess(): PeerLink[];
  enablePeerAccess(from: number, to: number): boolean;
  /**
   * direct: 0 'auto', 1 on, 2 off; byteLength -1: to the end of the file; progress: [done, total];
   * fd: read this open file (left open), which path only names.
   */
  fileRead(
    path: string,
    dst: unknown,
    dstOffset: number,
    fileOffset: number,
    byteLength: number,
    direct: number,
    progress?: BigUint64Array,
    fd?: number,
  ): FileReadInfo;
  fileReadAsync(
    path: string,
    dst: unknown,
    dstOffset: number,
    fileOffset: number,
    byteLength: number,
    direct: number,
    progress?: BigUint64Array,
    fd?: number,
  ): Promise<FileReadInfo>;
  fileWrite(
    path: string,
    src: unknown,
    srcOffset: number,
    byteLength: number,
    fsync: boolean,
    mode: number | undefined,
    progress?: BigUint64Array,
    fileOffset?: number,
  ): number;
  fileWriteAsync(
    path: string,
    src: unknown,
    srcOffset: number,
    byteLength: number,
    fsync: boolean,
    mode: number | undefined,
    progress?: BigUint64Array,
    fileOffset?: number,
  ): Promise<number>;
  fileStorageRead(path: string, fileOffset: number, byteLength: number, direct: number): FileReadInfo & { seconds: number };
  fileCache(path: string, drop: boolean): { resident: number; dropped: boolean };
  /** Starts replacing path (its links followed): [the temporary file to fill, the target]. */
  fileReplaceBegin(path: string): [string, string];
  /** Renames tmp over target (fsync'd first with sync); removes tmp on failure. */
  fileReplaceCommit(path: string, tmp: string, target: string, sync: boolean): void;
  fileDirectChoices(): { device: number; direct: boolean; directRate: number; bufferedRate: number; reason: string }[];
  managedAlloc(bytes: number, device: number, attachHost: boolean): [number, ArrayBuffer];
  managedPrefetch(handle: number, offset: number, n: number, location: number, stream?: unknown): Promise<void>;
  managedAdvise(handle: number, offset: number, n: number, advice: number, location: number): void;
  managedAttributes(handle: number, offset: number, n: number): object;
  managedConcurrent(device: number): boolean;
  managedSynchronize(device: number): void;
  timeRawManaged(bytes: number, warmup: number, iterations: number, what: string, device: number): Float64Array;
}

/** What a file read did: bytes read, and whether it bypassed the page cache (O_DIRECT) and why. */
export interface FileReadInfo {
  bytes: number;
  direct: boolean;
  directReason: string;
}

/** The names every build of the addon exports. */
export const NATIVE_EXPORTS = [
  'init',
  'status',
  'devices',
  'memGetInfo',
  'deviceProcesses',
  'deviceAlloc',
  'pinnedAlloc',
  'registerHost',
  'free',
  'freeOn',
  'handleInfo',
  'liveCount',
  'liveSummary',
  'rawDeviceAlloc',
  'rawDeviceFree',
  'nvmlState',
  'copy',
  'copyArgs',
  'copyHandles',
  'copyAsync',
  'memset',
  'configureStaging',
  'streamCreate',
  'streamSynchronize',
  'streamQuery',
  'streamDestroy',
  'eventCreate',
  'eventRecord',
  'eventSynchronize',
  'eventQuery',
  'eventElapsed',
  'eventDestroy',
  'createAllocator',
  'allocatorAlloc',
  'allocatorStats',
  'allocatorRegions',
  'allocatorInfo',
  'allocatorResetPeak',
  'allocatorResetAccumulated',
  'allocatorSetFraction',
  'allocatorEmptyCache',
  'allocatorClose',
  'allocatorRecord',
  'allocatorTrace',
  'allocatorSnapshot',
  'blockId',
  'allocatorsLive',
  'timeCopy',
  'timeBidirectional',
  'timeRawPinned',
  'timeHostCopy',
  'timeTogether',
  'timePeerLatency',
  'stagingPlacement',
  'timeRawAlloc',
  'timeHostRegister',
  'groupPath',
  'groupRead',
  'ipcExport',
  'ipcImport',
  'ipcImporters',
  'ipcWithdraw',
  'ipcImportForeign',
  'allocationBytesFrom',
  'platformLimits',
  'sharedHostCreate',
  'sharedHostOpen',
  'sharedHostUnlink',
  'peerAccess',
  'enablePeerAccess',
  'fileRead',
  'fileReadAsync',
  'fileWrite',
  'fileWriteAsync',
  'fileStorageRead',
  'fileCache',
  'fileReplaceBegin',
  'fileReplaceCommit',
  'fileDirectChoices',
  'managedAlloc',
  'managedPrefetch',
  'managedAdvise',
  'managedAttributes',
  'managedConcurrent',
  'managedSynchronize',
  'timeRawManaged',
] as const;

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
      binding.init({ CudaMemoryError, CudaError, OutOfMemoryError, CudaUnavailableError, InterprocessError });
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

/** Throws CudaUnavailableError unless a CUDA device can be used. */
export function requireCuda(): void {
  const st = native.status();
  if (!st.available) throw new CudaUnavailableError(st.reason as never, st.message);
}
