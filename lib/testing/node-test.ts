/**
 * node:test with the leak gate: `node --test --require cuda-memory/node-test`, or
 * `require('cuda-memory/node-test')` at the top of a test file. Every test of the file (or run)
 * fails with what it leaked. Options come from the environment (`CUDA_MEMORY_LEAK_DRIVER`,
 * `CUDA_MEMORY_LEAK_TOLERANCE`).
 */
import { installLeakGate } from './hooks';

// eslint-disable-next-line @typescript-eslint/no-var-requires
const nodeTest = require('node:test') as { beforeEach(fn: () => unknown): void; afterEach(fn: (ctx: unknown) => unknown): void };
installLeakGate(nodeTest);
