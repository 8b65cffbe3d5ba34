/**
 * The benchmark and CI toolkit, `require('cuda-memory/bench')`: the transfer, multi-GPU, peer and
 * file benchmarks, doctor, gates (`h2d.pinned>=48GB/s`), the expectation files shipped per GPU model
 * and link, the faults a failed gate names, and the sample statistics they report.
 * `cuda-memory bench` and `cuda-memory doctor` are these functions on the command line.
 * @packageDocumentation
 * @module cuda-memory/bench
 */
import '../base/disposable';
export { runTransferBenchmark, gateSource } from './transfer';
export type {
  TransferBenchmarkOptions,
  TransferReport,
  TransferResult,
  TransferMode,
  Direction,
  TransferEnvironment,
  EventLoopWatch,
  SkippedProbe,
} from './transfer';
export { runDevicesBenchmark } from './devices';
export type {
  DevicesBenchmarkOptions,
  DevicesReport,
  DeviceRate,
  DevicesAggregate,
  DevicesMode,
  DevicesDirection,
  MultiGpuEnvironment,
  BenchGpu,
} from './devices';
export { runP2pBenchmark } from './p2p';
export type { P2pBenchmarkOptions, P2pReport, P2pPair, P2pBidirectional, P2pLatency } from './p2p';
export { runFilesBenchmark, filesGateSource } from './files';
export type { FilesBenchmarkOptions, FilesReport, FilesResult } from './files';
export { runDoctor, runDoctorDevices } from './doctor';
export type { DoctorOptions, DoctorReport, DoctorCheck, DoctorDevicesOptions, DoctorDevicesReport, DoctorPair } from './doctor';
export { parseGate, evaluateGates } from './gates';
export type { Gate, GateResult, GateMetric, GateUnit, GateSource } from './gates';
export {
  readExpectations,
  checkExpectations,
  shippedExpectations,
  expectationsMatch,
  expectationsFor,
  expectationGates,
} from './expectations';
export type { Expectations, ExpectedFigures, ExpectationTarget } from './expectations';
export { faultsFor, faultsOfFailure, clockState } from './faults';
export type { Fault, FaultCode, ClockState, RunObservation } from './faults';
export type { NvmlDeviceState } from '../base/types';
export { runState } from './run-state';
export type { RunState } from './run-state';
export { summarize } from './stats';
export type { SampleSummary } from './stats';

import { applySavedStagingSettings } from '../transfer/staging';
applySavedStagingSettings();
