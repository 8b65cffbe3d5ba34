/**
 * The leak gate around each test of a runner that has `beforeEach` and `afterEach` hooks
 * (node:test, vitest, mocha, jest's setup files): the snapshot before each test, the check after.
 * A leak throws a {@link LeakError} from the hook the check runs in, which fails the test. Each
 * test is measured against a snapshot of its own; a test that runs at the same time as another
 * (not inside it) cannot be told apart from it, and fails with ERR_LEAK_GATE_CONCURRENT.
 */
import { CudaMemoryError, invalidArgument } from '../base/errors';
import { isReadable } from '../base/validate';
import { GateCore, LeakError, LeakGate, LeakGateOptions, LeakSnapshot, createGateCore, gateOver } from './leaks';

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

/**
 * @internal The error of a test the gate cannot check because others ran at the same time: what
 * each leaves cannot be told apart. `why` says what ran beside it, `how` how to run them apart.
 */
export function concurrentTestsError(name: string, why: string, how: string): CudaMemoryError {
  return new CudaMemoryError(
    `the leak gate cannot check ${JSON.stringify(name)}: ${why}, and what each test leaves cannot be told apart; ${how}`,
    'ERR_LEAK_GATE_CONCURRENT',
  );
}

/** @internal Test names for a message, quoted, the first five of them. */
export function testNames(names: string[]): string {
  const shown = names.slice(0, 5).map((n) => JSON.stringify(n));
  return shown.join(', ') + (names.length > shown.length ? ` and ${names.length - shown.length} more` : '');
}

// What a runner passes its hooks: node:test's TestContext (name, fullName, after), vitest's
// context (a function, whose own `name` is "context": task, onTestFinished), jest's and mocha's
// `this` (a per-test object in jest, the suite's context in mocha) with no argument.
interface RunnerContext {
  name?: unknown;
  fullName?: unknown;
  after?: (fn: () => unknown) => unknown;
  task?: VitestTask;
  onTestFinished?: (fn: () => unknown) => unknown;
}
interface VitestTask {
  name?: unknown;
  suite?: VitestTask;
  result?: { state?: unknown };
}

const readable = (v: unknown): v is RunnerContext => (typeof v === 'object' || typeof v === 'function') && v !== null && isReadable(v);

// The test's name: vitest's task and its describe blocks (as vitest prints them, joined by
// " > "), node:test's full name (its suites' and parent tests' names, where the Node has it),
// else jest's expect state.
function testName(ctx: RunnerContext | undefined): string | undefined {
  if (ctx?.task && typeof ctx.task.name === 'string') {
    const names: string[] = [];
    for (let t: VitestTask | undefined = ctx.task; t && typeof t.name === 'string'; t = t.suite) names.unshift(t.name);
    return names.join(' > ');
  }
  if (typeof ctx === 'object' && ctx) {
    if (typeof ctx.fullName === 'string') return ctx.fullName;
    if (typeof ctx.name === 'string') return ctx.name;
  }
  const expect = (globalThis as { expect?: { getState?: () => { currentTestName?: string } } }).expect;
  return expect?.getState?.().currentTestName;
}

// Whether jest runs test.concurrent tests in this file: it sets this in expect's state then.
function jestConcurrent(): boolean {
  const expect = (globalThis as { expect?: { getState?: () => { currentConcurrentTestName?: unknown } } }).expect;
  return typeof expect?.getState?.().currentConcurrentTestName === 'function';
}

// A test the gate has begun and not checked yet.
interface OpenTest {
  key: unknown; // the runner's context of the test, else a shared key (one test at a time)
  ctx: RunnerContext | undefined;
  name: string;
  path: string | undefined; // node:test's full name, to tell a subtest from a concurrent test
  before: LeakSnapshot;
  with: Set<string>; // the tests that ran at the same time as this one
  late: boolean; // checked by a hook of its own after every afterEach hook
}

const HOW =
  'run them one at a time (node:test: no concurrency option on their suite; vitest: no describe.concurrent or test.concurrent; jest: test(), not test.concurrent)';

// The tests the gate has begun and not checked yet, on `core`: `begin` in a beforeEach hook,
// `after` in an afterEach hook, each with the hook's argument (the runner's context, if it gives
// one) and its `this`.
function openTests(core: GateCore) {
  const open: OpenTest[] = [];
  const SHARED = {};
  const keyOf = (ctx: RunnerContext | undefined, self: unknown) => ctx ?? (readable(self) ? self : SHARED);

  const finish = (t: OpenTest) => {
    const i = open.indexOf(t);
    if (i < 0) return;
    open.splice(i, 1);
    const allowed = takeAllowLeaks();
    if (t.with.size)
      throw concurrentTestsError(
        t.name,
        `${t.with.size === 1 ? 'another test' : 'other tests'} ran at the same time (${testNames([...t.with])})`,
        HOW,
      );
    const report = core.report(t.before, t.name);
    if (!allowed && report.leaks.length) throw new LeakError(report);
  };

  const begin = (ctx: RunnerContext | undefined, self: unknown) => {
    // A vitest test that ended without its onTestFinished (ctx.skip()) is not open any more.
    for (let i = open.length - 1; i >= 0; i--) {
      const state = open[i].ctx?.task?.result?.state;
      if (state !== undefined && state !== 'run') open.splice(i, 1);
    }
    if (open.length === 0) takeAllowLeaks();
    const name = testName(ctx) ?? '(a test)';
    const path = typeof ctx === 'object' && ctx && typeof ctx.fullName === 'string' ? ctx.fullName : undefined;
    const t: OpenTest = { key: keyOf(ctx, self), ctx, name, path, before: core.snapshot(), with: new Set(), late: false };
    for (const o of open) {
      // A node:test subtest runs inside its parent, not beside it.
      if (o.path !== undefined && path !== undefined && path.startsWith(`${o.path} > `)) continue;
      o.with.add(name);
      t.with.add(o.name);
    }
    if (jestConcurrent()) t.with.add("this file's test.concurrent tests");
    open.push(t);
    if (ctx && typeof ctx.onTestFinished === 'function') {
      t.late = true;
      ctx.onTestFinished(() => finish(t));
    }
  };

  const after = (ctx: RunnerContext | undefined, self: unknown) => {
    const key = keyOf(ctx, self);
    const t = open.find((o) => o.key === key) ?? (key === SHARED ? open[open.length - 1] : undefined);
    if (!t || t.late) return;
    if (ctx && typeof ctx.after === 'function') {
      // node:test: after hooks run after the afterEach hooks, in the order they were registered.
      t.late = true;
      ctx.after(() => finish(t));
    } else finish(t);
  };
  return { begin, after };
}

/**
 * Puts the leak gate around every test that `hooks` reach (registered at the top level of a
 * setup file or test file: every test of that file or run). Each test is measured against a
 * snapshot taken in its beforeEach hook. The check runs once the test is done, after every
 * afterEach hook and every cleanup of the test's own, where the runner says when that is
 * (node:test: a `t.after` registered from the afterEach hook, after the test's own; vitest: its
 * `onTestFinished`, which vitest runs last of the test's); elsewhere in an afterEach hook of its
 * own, which runs before the afterEach hooks registered after it at the same level. A test that
 * ran at the same time as another (node:test's concurrency, vitest's describe.concurrent, jest's
 * test.concurrent) fails with ERR_LEAK_GATE_CONCURRENT; a node:test subtest is checked on its
 * own, and its parent with what the subtest left. Returns a gate with the same options.
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
  const core: GateCore = createGateCore(options);
  const tests = openTests(core);
  // Hooks that declare no parameter: jest and mocha give a hook that does a `done` callback to
  // wait for, and vitest reads the first parameter of a hook as its fixtures where there are any.
  beforeEach.call(hooks, function (this: unknown) {
    // eslint-disable-next-line prefer-rest-params
    const ctx = arguments[0];
    tests.begin(readable(ctx) ? ctx : undefined, this);
  });
  afterEach.call(hooks, function (this: unknown) {
    // eslint-disable-next-line prefer-rest-params
    const ctx = arguments[0];
    tests.after(readable(ctx) ? ctx : undefined, this);
  });
  return gateOver(core);
}
