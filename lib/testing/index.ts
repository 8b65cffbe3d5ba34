/** The leak gate's API, for any test runner: `require('cuda-memory/testing')`. */
export { createLeakGate, compareSnapshots, formatLeaks, libraryResources, rawDeviceAlloc, LeakError } from './leaks';
export type { DriverReading, Leak, LeakDriverSource, LeakGate, LeakGateOptions, LeakReport, LeakSnapshot, RawAllocation } from './leaks';
export { installLeakGate, allowLeaks } from './hooks';
export type { TestHooks } from './hooks';
export type { LiveBufferRow } from '../base/types';
