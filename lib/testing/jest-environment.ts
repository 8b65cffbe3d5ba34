/**
 * jest's test environment with the leak gate: `testEnvironment: 'cuda-memory/jest-environment'`.
 * It takes the snapshot when a test starts (before its beforeEach hooks) and checks when the test
 * is done (after every afterEach hook, the test file's own included), and fails the test with
 * what leaked. It extends jest's `node` environment; its `withLeakGate(Base)` adds the gate to
 * another environment class. Options: `testEnvironmentOptions: { cudaMemoryLeaks: { driver, driverToleranceBytes } }`.
 */
import { LeakGateOptions, createLeakGate } from './leaks';
import { concurrentTestsError, takeAllowLeaks, testNames } from './hooks';

type EnvironmentClass = new (config: any, context: any) => { global: object; handleTestEvent?(event: any, state: any): unknown };

// jest-circus's test and describe blocks, as far as the gate reads them.
interface CircusTest {
  name: string;
  concurrent?: boolean;
  mode?: string;
  parent?: CircusBlock;
  errors: unknown[];
}
interface CircusBlock {
  name: string;
  parent?: CircusBlock;
  children?: (CircusTest | CircusBlock)[];
}

// A test's name and its describe blocks' names make the full name.
function fullName(test: CircusTest): string {
  const names = [test.name];
  for (let p = test.parent; p && p.name !== 'ROOT_DESCRIBE_BLOCK'; p = p.parent) names.unshift(p.name);
  return names.join(' ');
}

// The test.concurrent tests under a block that jest may run (those skipped or todo it never starts).
function concurrentTests(block: CircusBlock): CircusTest[] {
  const out: CircusTest[] = [];
  for (const c of block.children ?? []) {
    if ('children' in c) out.push(...concurrentTests(c));
    else if ((c as CircusTest).concurrent && (c as CircusTest).mode !== 'skip' && (c as CircusTest).mode !== 'todo')
      out.push(c as CircusTest);
  }
  return out;
}

// The error the gate adds to a test: its stack is the message alone, since the frames would be
// this environment's, not the test's.
function testError(name: string, message: string, fields: Record<string, unknown>): Error {
  const error = new Error(message);
  error.name = name;
  error.stack = `${name}: ${message}`;
  return Object.assign(error, fields);
}

// Adds the leak gate to a jest test environment class (exported as the environment's
// `withLeakGate`, for a project that has its own environment).
function withLeakGate<T extends EnvironmentClass>(Base: T): T {
  // @ts-expect-error: a mixin's constructor takes the base's arguments
  return class LeakGateEnvironment extends Base {
    private readonly leakGate;
    // jest starts every test.concurrent test of a file when the file's tests begin, before the
    // first test_started; these are the ones not done yet. While any is, no test can be checked.
    private concurrent: CircusTest[] = [];
    private running = new Set<CircusTest>();
    private refused: CircusTest | null = null;
    constructor(config: any, context: any) {
      super(config, context);
      const options = (config?.projectConfig?.testEnvironmentOptions ?? config?.testEnvironmentOptions ?? {}).cudaMemoryLeaks as
        LeakGateOptions | undefined;
      this.leakGate = createLeakGate(options);
    }
    async handleTestEvent(event: any, state: any): Promise<void> {
      if (super.handleTestEvent) await super.handleTestEvent(event, state);
      if (event.name === 'run_describe_start' && !event.describeBlock.parent) {
        this.concurrent = concurrentTests(event.describeBlock);
        this.running = new Set(this.concurrent);
      } else if (event.name === 'test_started') {
        takeAllowLeaks(this.global);
        if (this.running.size > 0) this.refused = event.test;
        else this.leakGate.begin();
      } else if (event.name === 'test_skip' || event.name === 'test_todo') {
        this.running.delete(event.test);
      } else if (event.name === 'test_done') {
        const test = event.test as CircusTest;
        this.running.delete(test);
        if (this.refused === test) {
          this.refused = null;
          takeAllowLeaks(this.global);
          const others = (test.concurrent ? this.concurrent : [...this.running]).filter((t) => t !== test).map(fullName);
          const why = test.concurrent
            ? `jest starts every test.concurrent test of a file before the file's first test begins${others.length ? ` (here also ${testNames(others)})` : ''}, so no snapshot can come before this one started`
            : `it ran while test.concurrent tests were still running (${testNames(others)})`;
          const error = concurrentTestsError(fullName(test), why, 'write them with test(), not test.concurrent');
          test.errors.push(testError('CudaMemoryError', error.message, { code: error.code }));
          return;
        }
        const report = this.leakGate.end(fullName(test));
        if (takeAllowLeaks(this.global) || report.leaks.length === 0) return;
        test.errors.push(testError('LeakError', report.message, { code: 'ERR_DEVICE_MEMORY_LEAK', leaks: report.leaks }));
      }
    }
  };
}

// jest-environment-node comes with jest; it is looked up from the project that runs jest.
// eslint-disable-next-line @typescript-eslint/no-var-requires
const node = require(require.resolve('jest-environment-node', { paths: [process.cwd(), __dirname] }));
export = Object.assign(withLeakGate(node.TestEnvironment ?? node.default ?? node), { withLeakGate });
