/**
 * The addon's surface: every native export, its name written once with its type, and the handle
 * types it hands out. The list of names (NATIVE_EXPORTS) and the NativeBinding type both come from
 * the one table below; `test/binding/load.test.js` checks that the addon registers exactly these
 * (native/binding/exports.h: each concern's Register table). Imports only base types, so the
 * bottom of the graph knows nothing of the top. The loader, beside this file, loads the addon.
 */
import type { CudaError, CudaMemoryError, CudaUnavailableError, InterprocessError, OutOfMemoryError } from '../base/errors';
import type {
  FileCodeTable,
  GroupStats,
  IpcHandle,
  LiveBufferRow,
  ManagedAttributes,
  NvmlDeviceState,
  PeerLink,
  StagingPlacement,
  StagingSettings,
  UnchargedProcess,
} from '../base/types';

declare const brand: unique symbol;
/** A value of type T that only the export that made it hands out: another T does not pass for it. */
type Brand<T, Name extends string> = T & { readonly [brand]: Name };

/** A stream made by streamCreate (an External that the addon checks by its type tag). */
export type StreamHandle = Brand<object, 'StreamHandle'>;
/** An event made by eventCreate (an External that the addon checks by its type tag). */
export type EventHandle = Brand<object, 'EventHandle'>;
/** An allocator made by createAllocator (an External that the addon checks by its type tag). */
export type AllocatorHandle = Brand<object, 'AllocatorHandle'>;
/**
 * A buffer: slot + generation x 2^24 in the environment's handle table
 * (native/core/binding/handle_table.h). A plain number, as the JavaScript classes keep it and
 * copyArgs() carries it; the generation makes a stale or forged one miss.
 */
export type BufferHandle = number;
/** One side of a copy, a fill, a file read or write: a buffer of the library, or host memory. */
export type CopyTarget = BufferHandle | ArrayBufferView;

/** What a file read did: bytes read, and whether it bypassed the page cache (O_DIRECT) and why. */
export interface FileReadInfo {
  bytes: number;
  direct: boolean;
  directReason: string;
}

/**
 * The two counters a file call updates as it goes: [bytes done, bytes in all]. An interface, so
 * that the declarations name it: TypeScript 5.7 and later would write the array itself out as
 * `BigUint64Array<ArrayBufferLike>`, which TypeScript 5.0 to 5.6 refuse (their typed arrays take
 * no type argument).
 */
export interface ProgressCounters extends BigUint64Array {}

/** The arguments of fileRead and fileReadAsync. */
type FileReadArgs = [
  path: string,
  dst: CopyTarget,
  dstOffset: number,
  fileOffset: number,
  byteLength: number,
  direct: number,
  progress?: ProgressCounters,
  fd?: number,
];

/** The arguments of fileWrite and fileWriteAsync. */
type FileWriteArgs = [
  path: string,
  src: CopyTarget,
  srcOffset: number,
  byteLength: number,
  fsync: boolean,
  mode: number | undefined,
  progress?: ProgressCounters,
  fileOffset?: number,
];

/** The arguments of copy and copyAsync. */
type CopyArgs = [
  dst: CopyTarget,
  dstOffset: number,
  src: CopyTarget,
  srcOffset: number,
  n: number,
  strategy?: string,
  stream?: StreamHandle,
];

/** How timeCopy and timeBidirectional time their copies; timing: 'events' or 'clock'. */
type TimedRun = [bytes: number, warmup: number, iterations: number, timing: string, strategy?: string];

/** A device as devices() describes it; lib/device/discovery.ts adds the rest of DeviceInfo. */
export interface NativeDevice {
  index: number;
  name: string;
  uuid: string;
  totalMemory: number;
  pciBusId: string;
}

/** What allocatorInfo() reports of an allocator; the fields after `computeCapability` are one backend's. */
export interface NativeAllocatorInfo {
  device: number;
  simulated: boolean;
  allowGrowth: boolean;
  garbageCollection: boolean;
  limitBytes: number;
  limitSource: string;
  initialPoolBytes: number;
  deviceFree: number;
  deviceTotal: number;
  computeCapability: string;
  liveBlocks: number;
  /** bfc */
  managed?: boolean;
  hostBytes?: number;
  expandableSegments?: boolean;
  granularity?: number;
  reservedRange?: number;
  /** bfc, in a group: the group's ledger. */
  group?: GroupStats;
  /** async: whether it allocates from the device's default pool. */
  defaultPool?: boolean;
}

/** One counter of allocatorStats(), as RMM and PyTorch keep it. */
export interface NativeCounter {
  current: number;
  peak: number;
  total: number;
  freed: number;
}

/**
 * What allocatorStats() reports (native/allocator/backend.cc, StatsObject); lib/allocator adds
 * the backend's name.
 */
export interface NativeAllocatorStats {
  bytesInUse: number;
  peakBytesInUse: number;
  requestedBytesInUse: number;
  poolBytes: number;
  peakPoolBytes: number;
  limitBytes: number;
  numAllocs: number;
  numFrees: number;
  numOoms: number;
  numAllocRetries: number;
  largestAllocSize: number;
  largestFreeBlock: number;
  regions: number;
  fragmentation: number;
  numRegionAllocs: number;
  gcReleasedBytes: number;
  requestedBytes: NativeCounter;
  allocatedBytes: NativeCounter;
  allocations: NativeCounter;
  reservedBytes: NativeCounter;
  segments: NativeCounter;
  /** async: the CUDA memory pool's attributes. */
  cudaMemPool?: {
    reservedBytes: number;
    reservedPeakBytes: number;
    usedBytes: number;
    usedPeakBytes: number;
    releaseThreshold: number;
  };
}

/** One region of allocatorRegions() (a bfc pool's; the async backend has none). */
export interface NativeRegion {
  address: number;
  size: number;
  bytesInUse: number;
  blocks: number;
}

/** The error classes init() takes, which native code constructs (native/binding/errors.cc). */
export interface NativeErrorClasses {
  CudaMemoryError: typeof CudaMemoryError;
  CudaError: typeof CudaError;
  OutOfMemoryError: typeof OutOfMemoryError;
  CudaUnavailableError: typeof CudaUnavailableError;
  InterprocessError: typeof InterprocessError;
}

// Declares one export's type. The value is only a placeholder: the table's keys are the names.
function fn<F extends (...args: never[]) => unknown>(): F {
  return undefined as unknown as F;
}

const surface = {
  /**
   * The error classes native code constructs, the codes of its file errors (lib/base/files.ts),
   * and this environment's thread id (worker_threads.threadId).
   */
  init: fn<(classes: NativeErrorClasses, fileCodes: FileCodeTable, threadId: number) => void>(),
  status: fn<
    () => {
      available: boolean;
      reason: string | null;
      message: string;
      deviceCount: number;
      driverVersion: number;
      runtimeVersion: number;
      builtWithCuda: boolean;
    }
  >(),
  devices: fn<() => NativeDevice[]>(),
  memGetInfo: fn<(device: number) => { free: number; total: number }>(),
  /** NVML's compute processes on the GPU of this uuid; null where NVML cannot answer. */
  deviceProcesses: fn<(uuid: string) => { pid: number; usedBytes: number | null }[] | null>(),
  /** What NVML says of a device now, or null where it does not know it. */
  nvmlState: fn<(pciBusId: string) => NvmlDeviceState | null>(),
  deviceAlloc: fn<(bytes: number, device: number) => BufferHandle>(),
  pinnedAlloc: fn<(bytes: number, flags: number, device: number) => [BufferHandle, ArrayBuffer]>(),
  registerHost: fn<(view: ArrayBufferView, flags: number, device: number) => BufferHandle>(),
  free: fn<(handle: BufferHandle) => boolean>(),
  /** free() after the work queued on `stream` (in its order, for a kind freed in stream order). */
  freeOn: fn<(handle: BufferHandle, stream: StreamHandle) => boolean>(),
  handleInfo: fn<
    (handle: BufferHandle) => {
      address?: number;
      devicePointer?: number | null;
      released: boolean;
      simulated?: boolean;
      numaNode?: number;
    }
  >(),
  liveCount: fn<() => number>(),
  /** The live buffers by kind, device and simulated-ness (for leak checks). */
  liveSummary: fn<() => LiveBufferRow[]>(),
  /**
   * What the process's other environments (worker threads) hold, with their `thread`; those that
   * run a leak gate of their own are left out. Allocators by count, without their pools' bytes.
   */
  liveElsewhere: fn<() => LiveBufferRow[]>(),
  /** This environment runs a leak gate: other environments' liveElsewhere() leave it out. */
  leakGateHere: fn<() => void>(),
  /**
   * A cudaMalloc no handle knows of (leak checks' tests): its device address, which only
   * rawDeviceFree frees (it is no BufferHandle).
   */
  rawDeviceAlloc: fn<(bytes: number, device: number, simulated: boolean, where: string, listed: boolean) => number>(),
  rawDeviceFree: fn<(address: number) => boolean>(),
  copy: fn<(...args: CopyArgs) => void>(),
  /** The memory copyHandles() reads its three numbers from (see copy() in lib/transfer/copy.ts). */
  copyArgs: fn<() => ArrayBuffer>(),
  /** copy() of byteLength bytes between the two handles written into copyArgs(), from offset 0. */
  copyHandles: fn<() => void>(),
  /** Whether the driver gave each entry point a synchronous pinned copy() goes through (else cudaMemcpy). */
  pinnedMemcpyEntries: fn<() => { cuMemcpyHtoD: boolean; cuMemcpyDtoH: boolean; cuCtxGetCurrent: boolean }>(),
  copyAsync: fn<(...args: CopyArgs) => Promise<void>>(),
  memset: fn<(target: CopyTarget, offset: number, n: number, value: number) => void>(),
  configureStaging: fn<(options?: object) => StagingSettings>(),
  streamCreate: fn<(device: number, nonBlocking: boolean) => StreamHandle>(),
  streamSynchronize: fn<(s: StreamHandle) => void>(),
  streamQuery: fn<(s: StreamHandle) => boolean>(),
  streamDestroy: fn<(s: StreamHandle) => boolean>(),
  eventCreate: fn<(device: number, timing: boolean) => EventHandle>(),
  eventRecord: fn<(e: EventHandle, s?: StreamHandle) => void>(),
  eventSynchronize: fn<(e: EventHandle) => void>(),
  eventQuery: fn<(e: EventHandle) => boolean>(),
  eventElapsed: fn<(a: EventHandle, b: EventHandle) => number>(),
  eventDestroy: fn<(e: EventHandle) => boolean>(),
  /** The open allocators ('allocator') and group members ('group') by device, with pool bytes. */
  allocatorsLive: fn<() => LiveBufferRow[]>(),
  createAllocator: fn<(options: object) => AllocatorHandle>(),
  /** The handle's number (negative), which allocatorAlloc takes in its place; 0: none. */
  allocatorId: fn<(a: AllocatorHandle) => number>(),
  /** `a`: an allocator handle or its number (allocatorId). `stream`: the async backend's; a bfc block is usable on any stream at once. */
  allocatorAlloc: fn<(a: AllocatorHandle | number, bytes: number, alignment?: number, stream?: StreamHandle) => BufferHandle>(),
  allocatorStats: fn<(a: AllocatorHandle) => NativeAllocatorStats>(),
  allocatorRegions: fn<(a: AllocatorHandle) => NativeRegion[]>(),
  allocatorInfo: fn<(a: AllocatorHandle) => NativeAllocatorInfo>(),
  allocatorResetPeak: fn<(a: AllocatorHandle) => void>(),
  allocatorResetAccumulated: fn<(a: AllocatorHandle) => void>(),
  allocatorSetFraction: fn<(a: AllocatorHandle, fraction: number) => number>(),
  allocatorEmptyCache: fn<(a: AllocatorHandle) => number>(),
  /**
   * The pressure on a bfc member's group where its ledger changed since the last call, or while
   * under pressure (null: none, or no group; undefined: unchanged). `borrowing`: it holds more
   * than its own request.
   */
  allocatorGroupPressure:
    fn<(a: AllocatorHandle) => { reason: 'budget' | 'request'; bytes: number; pids: number[]; borrowing: boolean } | null | undefined>(),
  allocatorClose: fn<(a: AllocatorHandle, force: boolean) => number>(),
  allocatorRecord: fn<(a: AllocatorHandle, maxEvents: number | null) => void>(),
  allocatorTrace: fn<
    (a: AllocatorHandle) => {
      action: Uint8Array;
      time: Float64Array;
      id: Float64Array;
      requested: Float64Array;
      size: Float64Array;
      region: Float64Array;
      offset: Float64Array;
      dropped: number;
    }
  >(),
  allocatorSnapshot:
    fn<
      (
        a: AllocatorHandle,
      ) => { address: number; size: number; blocks: { offset: number; size: number; requested: number; id: number; inUse: boolean }[] }[]
    >(),
  blockId: fn<(handle: BufferHandle) => number>(),
  /** The upstream contract of native/core/allocator/upstream_contract.h over the CUDA device's upstream (managed: cudaMallocManaged's): the rules it found broken. For the test suite on a GPU. */
  upstreamContract: fn<(device: number, managed: boolean, slackBytes: number) => string[]>(),
  timeCopy: fn<(dst: CopyTarget, src: CopyTarget, ...run: TimedRun) => Float64Array>(),
  timeBidirectional: fn<(a: CopyTarget, b: CopyTarget, c: CopyTarget, d: CopyTarget, ...run: TimedRun) => Float64Array>(),
  /** direction: 'h2d' or 'd2h'. */
  timeRawPinned: fn<(bytes: number, warmup: number, iterations: number, direction: string, device: number) => Float64Array>(),
  /** The floor of a copy() call: its own pinned and device memory of `bytes` (up to 1 MiB) on `device`; direction: 'h2d' or 'd2h'. With bytes 0 (and nothing else), frees it. */
  pinnedCallFloorSetup: fn<((bytes: 0) => void) & ((bytes: number, direction: string, device: number) => void)>(),
  /** One copy of what pinnedCallFloorSetup made, reading no argument. */
  pinnedCallFloor: fn<() => void>(),
  /** direction: 'h2d', 'd2h' or 'bidir'; pinned holds a staging ring per direction; check: n bytes a direction standing for the device, for one untimed pass. */
  timeHostCopy:
    fn<
      (
        pageable: Uint8Array,
        pinned: BufferHandle,
        bytes: number,
        warmup: number,
        iterations: number,
        direction: string,
        check?: Uint8Array,
      ) => Float64Array
    >(),
  /** The staged path's chunks of a copy of `bytes` moved between a PinnedBuffer and a DeviceBuffer; direction: 'h2d' or 'd2h'. */
  timeStagedDma:
    fn<
      (device: BufferHandle, pinned: BufferHandle, bytes: number, warmup: number, iterations: number, direction: string) => Float64Array
    >(),
  /** kind: 'device' or 'pinned'; seconds per alloc+free pair. */
  timeRawAlloc: fn<(kind: string, bytes: number, iterations: number, device: number) => Float64Array>(),
  timeHostRegister: fn<(view: ArrayBufferView, iterations: number) => Float64Array>(),
  groupPath: fn<(dir: string, name: string, device: string) => string>(),
  groupRead: fn<(path: string, lockTimeoutMs: number) => GroupStats>(),
  /** Changes a live group's budget; returns the group after the change. */
  setGroupBudget: fn<(path: string, bytes: number, source: string, lockTimeoutMs: number) => GroupStats>(),
  /** Changes member pid's request; returns the group after the change. */
  setGroupRequest: fn<(path: string, pid: number, bytes: number, lockTimeoutMs: number) => GroupStats>(),
  /** The ledger's slot count (the most members a group has) and the size of its file. */
  groupFormat: fn<() => { slots: number; fileBytes: number }>(),
  /** Throws the InterprocessError that making a ledger at path would now (folder, room); else nothing. */
  groupProbe: fn<(path: string) => void>(),
  groupUncharged: fn<(dir: string, name: string, device: string) => UnchargedProcess[]>(),
  ipcExport: fn<(handle: BufferHandle, dir: string, lockTimeoutMs: number) => IpcHandle>(),
  /** device: -1 for the one the descriptor names; returns [handle, device]. */
  ipcImport: fn<(descriptor: IpcHandle, dir: string, device: number, lockTimeoutMs: number) => [number, number]>(),
  ipcImporters: fn<(handle: BufferHandle) => number[]>(),
  ipcWithdraw: fn<(handle: BufferHandle, force: boolean) => number[]>(),
  /** handle: 128 hex digits; wanted: a device or -1; allocationBytes: -1 when unknown; returns [handle, device, allocation bytes]. */
  ipcImportForeign:
    fn<
      (
        handle: string,
        offset: number,
        byteLength: number,
        device: string,
        wanted: number,
        allocationBytes: number,
      ) => [number, number, number]
    >(),
  allocationBytesFrom: fn<(handle: BufferHandle) => number>(),
  platformLimits:
    fn<
      (root: string, env: Record<string, string>, devices: { index: number; pciBusId?: string; uuid?: string }[]) => { devices: unknown[] }
    >(),
  /** Whether the file has file capabilities (security.capability); null where it cannot be told. */
  fileCapabilities: fn<(path: string) => boolean | null>(),
  sharedHostCreate: fn<(path: string, bytes: number, device: number) => [BufferHandle, ArrayBuffer]>(),
  sharedHostOpen: fn<(path: string, device: number) => [BufferHandle, ArrayBuffer]>(),
  sharedHostUnlink: fn<(path: string) => boolean>(),
  /** timing: 'events' (cudaMemcpyAsync between events), 'clock' (the library's copy), 'hostcopy' (the GPU's staging team between a PinnedBuffer and pageable memory). */
  timeTogether:
    fn<
      (
        jobs: { dst: CopyTarget; src: CopyTarget; bytes: number; timing: 'events' | 'clock' | 'hostcopy'; strategy?: string }[],
        warmup: number,
        iterations: number,
      ) => { seconds: Float64Array[]; wall: Float64Array }
    >(),
  timePeerLatency: fn<(dst: number, src: number, count: number, warmup: number, iterations: number) => Float64Array>(),
  stagingPlacement: fn<(device: number) => StagingPlacement>(),
  peerAccess: fn<() => PeerLink[]>(),
  enablePeerAccess: fn<(from: number, to: number) => boolean>(),
  /**
   * direct: 0 'auto', 1 on, 2 off; byteLength -1: to the end of the file; progress: [done, total];
   * fd: read this open file (left open), which path only names.
   */
  fileRead: fn<(...args: FileReadArgs) => FileReadInfo>(),
  fileReadAsync: fn<(...args: FileReadArgs) => Promise<FileReadInfo>>(),
  fileWrite: fn<(...args: FileWriteArgs) => number>(),
  fileWriteAsync: fn<(...args: FileWriteArgs) => Promise<number>>(),
  /** byteLength -1: to the end of the file; direct: 0 'auto', 1 on, 2 off. */
  fileStorageRead: fn<(path: string, fileOffset: number, byteLength: number, direct: number) => FileReadInfo & { seconds: number }>(),
  fileCache: fn<(path: string, drop: boolean) => { resident: number; dropped: boolean }>(),
  /** Starts replacing path (its links followed): [the temporary file to fill, the target]. */
  fileReplaceBegin: fn<(path: string) => [tmp: string, target: string]>(),
  /** Renames tmp over target (fsync'd first with sync); removes tmp on failure. */
  fileReplaceCommit: fn<(path: string, tmp: string, target: string, sync: boolean) => void>(),
  /** The error a file call whose `syscall` failed with `errno` throws (for tests: most errnos cannot be provoked). */
  fileErrnoError: fn<(errno: number, syscall: string, path: string) => Error>(),
  fileDirectChoices: fn<() => { device: number; direct: boolean; directRate: number; bufferedRate: number; reason: string }[]>(),
  managedAlloc: fn<(bytes: number, device: number, attachHost: boolean) => [BufferHandle, ArrayBuffer]>(),
  managedPrefetch: fn<(handle: BufferHandle, offset: number, n: number, location: number, stream?: StreamHandle) => Promise<void>>(),
  /** advice: a cudaMemoryAdvise value, 1 to 6. */
  managedAdvise: fn<(handle: BufferHandle, offset: number, n: number, advice: number, location: number) => void>(),
  managedAttributes: fn<(handle: BufferHandle, offset: number, n: number) => ManagedAttributes>(),
  managedConcurrent: fn<(device: number) => boolean>(),
  managedSynchronize: fn<(device: number) => void>(),
  /**
   * what: 'prefetch-h2d', 'prefetch-d2h', 'copy-h2d' or 'copy-d2h', or a prefetch's with
   * '-handoff'. managed, dev: buffer handles to time on instead of memory of its own (a copy
   * takes both or neither).
   */
  timeRawManaged:
    fn<
      (
        bytes: number,
        warmup: number,
        iterations: number,
        what: string,
        device: number,
        managed?: BufferHandle,
        dev?: BufferHandle,
      ) => Float64Array
    >(),
};

/** The native exports, with their types. */
export type NativeBinding = typeof surface;

/** The names every build of the addon exports. */
export const NATIVE_EXPORTS = Object.keys(surface) as readonly (keyof NativeBinding)[];
