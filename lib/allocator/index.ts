/**
 * Pool allocators with TensorFlow's memory policies (preallocation, allowGrowth, a memory
 * fraction or byte limit) and PyTorch-style statistics, over two backends (the BFC pool and
 * CUDA's stream-ordered pool), plus a cache of pinned host buffers.
 */
export { Allocator, createAllocator } from './allocator';
export { AllocatorSet, createAllocators } from './multi';
export { availableBytes } from './available';
export type { MultiAllocatorOptions, MultiAllocatorStats, AllocatorTotals, MultiAllocOptions } from './multi';
export type {
  AllocatorOptions,
  AllocatorStats,
  Counter,
  AllocatorBackend,
  AsyncPoolStats,
  AllocOptions,
  RegionInfo,
  SimulatedDevice,
  SimulatedPlatform,
  Availability,
  AvailableTerm,
  RecordingOptions,
  MemorySnapshot,
  SnapshotSegment,
  SnapshotBlock,
} from './allocator';
export { loadTrace, saveTrace, checkTrace, fromPyTorchSnapshot, TraceError } from './trace';
export type { Trace, TraceEvent } from './trace';
export { allocatorOptionsFromEnv } from './env';
export type { EnvAllocatorOptions } from './env';
export { PinnedPool, PooledPinnedBuffer, createPinnedPool } from './pinned-pool';
export type { PinnedPoolOptions, PinnedPoolStats } from './pinned-pool';
export { replayTrace, parsePolicy, formatReplay, smallestBudget, DIRECT_POLICY } from './replay';
export type { ReplayPolicy, ReplayOptions, ReplayResult, SmallestBudget } from './replay';
export { groupStats, listGroups, formatGroups } from './group';
export { preloadLibraryPath, memberEnvironment } from './member';
export { budgetFromAllocation } from './allocation';
export type { GpuGrant, GpuAllocation, GpuBudget, AllocationBudgetOptions } from './allocation';
export type { MemberEnvironmentOptions, Environment } from './member';
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
} from './group';
