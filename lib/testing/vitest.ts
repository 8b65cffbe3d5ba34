/**
 * vitest with the leak gate: a setup file (`test.setupFiles`) that runs
 *
 *     import { beforeEach, afterEach } from 'vitest';
 *     import { installLeakGate } from 'cuda-memory/vitest';
 *     installLeakGate({ beforeEach, afterEach });
 *
 * With `globals: true`, `import 'cuda-memory/vitest'` alone installs it from the global hooks,
 * once per module cache: with `isolate: false` the files share one, and only the explicit call
 * above reaches every file.
 */
import { installLeakGate } from './hooks';

export { installLeakGate, allowLeaks } from './hooks';

const g = globalThis as { beforeEach?: (fn: () => unknown) => unknown; afterEach?: (fn: () => unknown) => unknown; vi?: unknown };
if (g.vi && typeof g.beforeEach === 'function' && typeof g.afterEach === 'function')
  installLeakGate({ beforeEach: g.beforeEach, afterEach: g.afterEach });
