/**
 * cuda-memory: CUDA device memory, pinned host memory and the copies between them and Node
 * buffers; pool allocators with TensorFlow's memory policies; files and tensors to and from the
 * device; what the platform allows. The benchmark and CI toolkit is `cuda-memory/bench`, the
 * leak gate `cuda-memory/testing`, the Prometheus metrics `cuda-memory/metrics`.
 *
 * `require('cuda-memory')` never throws: without CUDA, {@link status} says why and every GPU
 * call throws {@link CudaUnavailableError}.
 *
 * Every name is written here, by concern: a name the package offers is one line of this list.
 * @packageDocumentation
 * @module cuda-memory
 */
import './base/disposable';
export { CudaMemoryError, CudaError, OutOfMemoryError, CudaUnavailableError, InterprocessError } from './base/errors';
export type { UnavailableReason, OutOfMemoryDetails, GroupRefusalReason } from './base/errors';
export { status, devices, formatCudaVersion, cudaVisibleDevices } from './device/discovery';
export type { CudaStatus, DeviceInfo, PcieLink, AddonBinary, PlatformStatus } from './device/discovery';
export { memGetInfo } from './allocator/tenant';
export type { MemInfo, TenantGroup } from './allocator/tenant';
export { peerAccess, enablePeerAccess } from './device/peers';
export type { PeerLink, NvLinkRate } from './device/peers';
export { sharedMemoryOf } from './device/shared-memory';
export type { SharedMemoryInfo, SharedMemoryFacts } from './device/shared-memory';
export { platformInfo } from './device/platform';
export type {
  PlatformInfo,
  PlatformLimit,
  PlatformLimitKind,
  PlatformOptions,
  PlatformDevice,
  DevicePlatformLimits,
  MigInfo,
  MpsClientInfo,
  DmemRegion,
} from './device/platform';
export { DeviceBuffer, PinnedBuffer, RegisteredBuffer, registerHost } from './memory/buffers';
export { ManagedBuffer } from './memory/managed';
export type {
  ManagedAllocOptions,
  ManagedAdvice,
  ManagedAttributes,
  ManagedLocation,
  ManagedRange,
  PrefetchOptions,
} from './memory/managed';
export type {
  Memory,
  LentMemory,
  DeviceAllocOptions,
  PinnedAllocOptions,
  RegisterOptions,
  FreeOptions,
  ImportIpcOptions,
  ExportIpcOptions,
} from './memory/buffers';
export type { IpcHandle, CudaIpcDescriptor } from './memory/ipc';
export { SharedPinnedBuffer, createSharedPinned, openSharedPinned, unlinkSharedPinned } from './memory/shared-pinned';
export type { SharedPinnedOptions } from './memory/shared-pinned';
export { shmDir } from './base/shm';
export { copy, copyAsync, memset } from './transfer/copy';
export type { CopyOptions, CopyAsyncOptions, TakenBuffers, CopyStrategy, MemsetOptions } from './transfer/copy';
export { configureStaging, stagingPlacement, stagingSettingsPath, saveStagingSettings, loadStagingSettings } from './transfer/staging';
export type { StagingSettings, StagingUpdate, StagingPlacement, SavedStagingSettings } from './transfer/staging';
export { readFile, readFileAsync, writeFile, writeFileAsync, readFileStorage, fileCache, fileDirectChoices } from './transfer/files';
export type {
  FileReadInfo,
  StorageReadInfo,
  ReadFileOptions,
  ReadFileAsyncOptions,
  WriteFileOptions,
  WriteFileAsyncOptions,
  FileProgressCallback,
  TakeOption,
  FileUrl,
} from './transfer/files';
export { loadTensors, loadTensorsAsync, DTYPE_BYTES } from './transfer/tensor-file';
export type { Dtype, TensorEntry, TensorView, LoadTensorsOptions, LoadTensorsAsyncOptions, LoadedTensors } from './transfer/tensor-file';
export {
  parseSafetensorsHeader,
  safetensorsHeaderLength,
  readSafetensorsHeader,
  loadSafetensors,
  loadSafetensorsAsync,
  saveSafetensors,
  saveSafetensorsAsync,
  SAFETENSORS_MAX_HEADER,
} from './transfer/safetensors';
export type { SafetensorsHeader, LoadedSafetensors, TensorSource, SaveSafetensorsOptions } from './transfer/safetensors';
export { Stream, Event } from './device/stream';
export { Allocator } from './allocator/allocator';
export { createAllocator } from './allocator/create';
export type { AllocatorOptions, SimulatedDevice, SimulatedPlatform } from './allocator/options';
export type {
  AllocatorStats,
  Counter,
  AllocatorBackend,
  AsyncPoolStats,
  AllocOptions,
  RegionInfo,
  Availability,
  AvailableTerm,
  RecordingOptions,
  MemorySnapshot,
  SnapshotSegment,
  SnapshotBlock,
} from './allocator/allocator';
export { AllocatorSet, createAllocators } from './allocator/multi';
export type { MultiAllocatorOptions, MultiAllocatorStats, AllocatorTotals, MultiAllocOptions } from './allocator/multi';
export { availableBytes } from './allocator/available';
export { allocatorOptionsFromEnv } from './allocator/env';
export type { EnvAllocatorOptions } from './allocator/env';
export { PinnedPool, PooledPinnedBuffer, createPinnedPool } from './allocator/pinned-pool';
export type { PinnedPoolOptions, PinnedPoolStats } from './allocator/pinned-pool';
export { loadTrace, saveTrace, checkTrace, fromPyTorchSnapshot, TraceError } from './allocator/trace';
export type { Trace, TraceEvent, TraceGroup, TraceGroupMember } from './allocator/trace';
export { replayTrace, parsePolicy, formatReplay, smallestBudget, DIRECT_POLICY } from './allocator/replay';
export type { ReplayPolicy, ReplayOptions, ReplayResult, SmallestBudget } from './allocator/replay';
export { groupStats, listGroups, formatGroups, setGroupBudget, setGroupRequest } from './allocator/group';
export type {
  SharedBudgetOptions,
  GroupStats,
  GroupJob,
  GroupMember,
  GroupStatsOptions,
  ListGroupsOptions,
  UnreadableGroup,
  UnchargedGroup,
  UnchargedProcess,
  GroupList,
} from './allocator/group';
export type { GroupPressureEvent } from './allocator/pressure';
export { preloadLibraryPath, memberEnvironment } from './allocator/member';
export type { MemberEnvironmentOptions, Environment } from './allocator/member';
export { budgetFromAllocation } from './allocator/allocation';
export type { GpuGrant, GpuAllocation, GpuBudget, AllocationBudgetOptions } from './allocator/allocation';
export { renderMemoryHtml } from './report/memory-html';
export type { MemoryHtmlOptions } from './report/memory-html';
export { parseSize, parseSizeList, formatBytes, formatRate } from './base/units';

import { native } from './binding/native';
import { applySavedStagingSettings } from './transfer/staging';
applySavedStagingSettings();

/** Buffers and handles this thread's addon instance still holds (for leak checks). */
export function liveHandleCount(): number {
  return native.liveCount();
}
