/**
 * The leak gate around each test of a runner that has `beforeEach` and `afterEach` hooks
 * (node:test, vitest, mocha, jest's setup files): the snapshot before each test, the check after.
 * A leak throws a {@link LeakError} from the `afterEach` hook, which fails the test.
 */
import { invalidArgument } from '../base/errors';
import { isReadable } from '../base/validate';
import { LeakGate, LeakGateOptions, createLeakGate } from './leaks';

/**
 * The hooks of a test runner, as node:test, vitest and jest export them.
 *
 * @category Testing
 */
export interface TestHooks {
  /** Registers `fn` to run before each test (it may get the runner's test context). */
  beforeEach(fn: (...args: any[]) => unknown): unknown;
  /** Registers `fn` to run after each test (it may get the runner's test context). */
  afterEach(fn: (...args: any[]) => unknown): unknown;
}

// The flag allowLeaks() sets for the running test. A registered symbol on the global object, so
// that a gate loaded in another realm (jest's environment) sees what the test's realm set.
const ALLOW = Symbol.for('cuda-memory.leak-gate.allow');

/**
 * Lets the running test leave memory behind (one that checks the finalizers, for instance): the
 * gate does not check it. The next test is checked again.
 *
 * @category Testing
 */
export function allowLeaks(): void {
  (globalThis as Record<symbol, unknown>)[ALLOW] = true;
}

/** @internal Whether the running test called allowLeaks() (read and cleared on `global`). */
export function takeAllowLeaks(global: object = globalThis): boolean {
  const g = global as Record<symbol, unknown>;
  const allowed = g[ALLOW] === true;
  g[ALLOW] = false;
  return allowed;
}

// The test's name from what a runner passes its afterEach hook: node:test's TestContext (name),
// vitest's context (task.name), else jest's expect state.
function testName(ctx: unknown): string | undefined {
  const c = ctx as { name?: unknown; task?: { name?: unknown } } | undefined;
  if (c && typeof c.name === 'string') return c.name;
  if (c && c.task && typeof c.task.name === 'string') return c.task.name;
  const expect = (globalThis as { expect?: { getState?: () => { currentTestName?: string } } }).expect;
  return expect?.getState?.().currentTestName;
}

/**
 * Puts the leak gate around every test that `hooks` reach (registered at the top level of a
 * setup file or test file: every test of that file or run). The check runs once the test is done,
 * after every afterEach hook, where the runner says when that is (node:test's `t.after`,
 * vitest's `onTestFinished`); elsewhere in an afterEach hook of its own, which runs before the
 * afterEach hooks registered after it at the same level. Returns the gate.
 *
 * @category Testing
 */
export function installLeakGate(hooks: TestHooks, options?: LeakGateOptions): LeakGate {
  if (hooks === null || (typeof hooks !== 'object' && typeof hooks !== 'function') || !isReadable(hooks))
    throw invalidArgument('hooks', "a test runner's hooks (an object with beforeEach and afterEach)", hooks);
  const { beforeEach, afterEach } = hooks;
  for (const [name, fn] of [
    ['beforeEach', beforeEach],
    ['afterEach', afterEach],
  ] as const)
    if (typeof fn !== 'function') throw invalidArgument(`hooks.${name}`, "a function (the test runner's hook)", fn);
  const gate = createLeakGate(options);
  let late = false; // this test's check is registered to run after its afterEach hooks
  const check = (ctx: unknown) => {
    if (takeAllowLeaks()) gate.end();
    else gate.check(testName(ctx));
  };
  beforeEach.call(hooks, (ctx: unknown) => {
    takeAllowLeaks();
    gate.begin();
    const c = ctx as { after?: (fn: () => unknown) => unknown; onTestFinished?: (fn: () => unknown) => unknown } | undefined;
    late = true;
    if (c && typeof c.after === 'function') c.after(() => check(ctx));
    else if (c && typeof c.onTestFinished === 'function') c.onTestFinished(() => check(ctx));
    else late = false;
  });
  afterEach.call(hooks, (ctx: unknown) => {
    if (!late) check(ctx);
  });
  return gate;
}
