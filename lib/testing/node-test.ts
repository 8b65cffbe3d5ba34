/**
 * node:test with the leak gate: `node --test --require cuda-memory/node-test`, or
 * `require('cuda-memory/node-test')` at the top of a test file. Every test of the file (or run)
 * fails with what it leaked. Options come from the environment (`CUDA_MEMORY_LEAK_DRIVER`,
 * `CUDA_MEMORY_LEAK_TOLERANCE`).
 *
 * `node --test` runs each test file in a child process of its own and passes `--require` to both:
 * the gate goes into the children, which run the tests. In the parent, which only reports them,
 * it does nothing: a hook registered there would start a second, empty run of tests in the parent
 * whose report the reporter writes beside the real one (a JUnit file that does not parse).
 */
import { installLeakGate } from './hooks';

// The value of a node option in `args`, as `--name=value` or `--name value`.
function option(args: readonly string[], names: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++)
    for (const n of names) {
      if (args[i] === n) return args[i + 1] ?? '';
      if (args[i].startsWith(`${n}=`)) return args[i].slice(n.length + 1);
    }
  return undefined;
}

// This process is the parent of `node --test`'s test files: it was started with --test, is not
// one of the children (which get NODE_TEST_CONTEXT), and runs its files in processes of their
// own (not with --test-isolation=none, where the tests run here).
const parent =
  process.env.NODE_TEST_CONTEXT === undefined &&
  process.execArgv.includes('--test') &&
  option(process.execArgv, ['--test-isolation', '--experimental-test-isolation']) !== 'none';

if (!parent) {
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  const nodeTest = require('node:test') as { beforeEach(fn: () => unknown): void; afterEach(fn: (ctx: unknown) => unknown): void };
  installLeakGate(nodeTest);
}
