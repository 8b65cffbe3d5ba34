/**
 * The device-memory leak gate, for any test runner: `require('cuda-memory/testing')`. jest's
 * environment, node:test and vitest have their own entry points (`cuda-memory/jest-environment`,
 * `cuda-memory/node-test`, `cuda-memory/vitest`).
 * @packageDocumentation
 * @module cuda-memory/testing
 */
import '../base/disposable';
export { createLeakGate, compareSnapshots, formatLeaks, libraryResources, rawDeviceAlloc, LeakError } from './leaks';
export type { DriverReading, Leak, LeakDriverSource, LeakGate, LeakGateOptions, LeakReport, LeakSnapshot, RawAllocation } from './leaks';
export { installLeakGate, allowLeaks } from './hooks';
export type { TestHooks } from './hooks';
export type { LiveBufferRow } from '../base/types';
