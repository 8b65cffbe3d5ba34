/**
 * jest's test environment with the leak gate: `testEnvironment: 'cuda-memory/jest-environment'`.
 * It takes the snapshot when a test starts (before its beforeEach hooks) and checks when the test
 * is done (after every afterEach hook, the test file's own included), and fails the test with
 * what leaked. It extends jest's `node` environment; its `withLeakGate(Base)` adds the gate to
 * another environment class. Options: `testEnvironmentOptions: { cudaMemoryLeaks: { driver, driverToleranceBytes } }`.
 */
import { LeakGateOptions, createLeakGate } from './leaks';
import { takeAllowLeaks } from './hooks';

type EnvironmentClass = new (config: any, context: any) => { global: object; handleTestEvent?(event: any, state: any): unknown };

// jest-circus's test: its name and its describe blocks' names make the full name.
function fullName(test: { name: string; parent?: { name: string; parent?: unknown } }): string {
  const names = [test.name];
  for (let p = test.parent; p && p.name !== 'ROOT_DESCRIBE_BLOCK'; p = p.parent as typeof p) names.unshift(p.name);
  return names.join(' ');
}

// Adds the leak gate to a jest test environment class (exported as the environment's
// `withLeakGate`, for a project that has its own environment).
function withLeakGate<T extends EnvironmentClass>(Base: T): T {
  // @ts-expect-error: a mixin's constructor takes the base's arguments
  return class LeakGateEnvironment extends Base {
    private readonly leakGate;
    constructor(config: any, context: any) {
      super(config, context);
      const options = (config?.projectConfig?.testEnvironmentOptions ?? config?.testEnvironmentOptions ?? {}).cudaMemoryLeaks as
        LeakGateOptions | undefined;
      this.leakGate = createLeakGate(options);
    }
    async handleTestEvent(event: any, state: any): Promise<void> {
      if (super.handleTestEvent) await super.handleTestEvent(event, state);
      if (event.name === 'test_started') {
        takeAllowLeaks(this.global);
        this.leakGate.begin();
      } else if (event.name === 'test_done') {
        const report = this.leakGate.end(fullName(event.test));
        if (takeAllowLeaks(this.global) || report.leaks.length === 0) return;
        const error = new Error(report.message);
        error.name = 'LeakError';
        error.stack = `LeakError: ${report.message}`; // the frames would be this environment's, not the test's
        Object.assign(error, { code: 'ERR_DEVICE_MEMORY_LEAK', leaks: report.leaks });
        event.test.errors.push(error);
      }
    }
  };
}

// jest-environment-node comes with jest; it is looked up from the project that runs jest.
// eslint-disable-next-line @typescript-eslint/no-var-requires
const node = require(require.resolve('jest-environment-node', { paths: [process.cwd(), __dirname] }));
export = Object.assign(withLeakGate(node.TestEnvironment ?? node.default ?? node), { withLeakGate });
