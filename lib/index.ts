/**
 * cuda-memory: CUDA device memory, pinned host memory and the copies between them and Node
 * buffers; a transfer benchmark; pool allocators with TensorFlow's memory policies.
 *
 * `require('cuda-memory')` never throws: without CUDA, {@link status} says why and every GPU
 * call throws {@link CudaUnavailableError}.
 * @packageDocumentation
 */
import './base/disposable';
export { CudaMemoryError, CudaError, OutOfMemoryError, CudaUnavailableError, InterprocessError } from './base/errors';
export type { UnavailableReason, OutOfMemoryDetails } from './base/errors';
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
export * from './allocator';
export { renderMemoryHtml } from './report/memory-html';
export type { MemoryHtmlOptions } from './report/memory-html';
export { parseSize, parseSizeList, formatBytes, formatRate } from './base/units';
export { runTransferBenchmark, gateSource } from './bench/transfer';
export type {
  TransferBenchmarkOptions,
  TransferReport,
  TransferResult,
  TransferMode,
  Direction,
  TransferEnvironment,
  EventLoopWatch,
  SkippedProbe,
} from './bench/transfer';
export { runDoctor, runDoctorDevices } from './bench/doctor';
export type { DoctorOptions, DoctorReport, DoctorCheck, DoctorDevicesOptions, DoctorDevicesReport, DoctorPair } from './bench/doctor';
export {
  readExpectations,
  checkExpectations,
  shippedExpectations,
  expectationsMatch,
  expectationsFor,
  expectationGates,
} from './bench/expectations';
export type { Expectations, ExpectedFigures, ExpectationTarget } from './bench/expectations';
export { faultsFor, faultsOfFailure, clockState } from './bench/faults';
export type { Fault, FaultCode, ClockState, RunObservation } from './bench/faults';
export type { NvmlDeviceState } from './base/types';
export { runState } from './bench/run-state';
export type { RunState } from './bench/run-state';
export { runDevicesBenchmark } from './bench/devices';
export type {
  DevicesBenchmarkOptions,
  DevicesReport,
  DeviceRate,
  DevicesAggregate,
  DevicesMode,
  DevicesDirection,
  MultiGpuEnvironment,
  BenchGpu,
} from './bench/devices';
export { runP2pBenchmark } from './bench/p2p';
export { runFilesBenchmark, filesGateSource } from './bench/files';
export type { FilesBenchmarkOptions, FilesReport, FilesResult } from './bench/files';
export type { P2pBenchmarkOptions, P2pReport, P2pPair, P2pBidirectional, P2pLatency } from './bench/p2p';
export { parseGate, evaluateGates } from './bench/gates';
export type { Gate, GateResult, GateMetric, GateUnit, GateSource } from './bench/gates';
export { summarize } from './bench/stats';
export { registerMetrics, metricsText, hpcJobMapping, writeHpcJobMapping } from './metrics';
export { createLeakGate, installLeakGate, allowLeaks, rawDeviceAlloc, LeakError } from './testing';
export type {
  DriverReading,
  Leak,
  LeakDriverSource,
  LeakGate,
  LeakGateOptions,
  LeakReport,
  LeakSnapshot,
  LiveBufferRow,
  RawAllocation,
  TestHooks,
} from './testing';
export type { MetricsSources, Named, PromRegistry, RegisterMetricsOptions } from './metrics';
export type { SampleSummary } from './bench/stats';

import { native } from './binding/native';
import { applySavedStagingSettings } from './transfer/staging';
applySavedStagingSettings();

/** Buffers and handles this thread's addon instance still holds (for leak checks). */
export function liveHandleCount(): number {
  return native.liveCount();
}
