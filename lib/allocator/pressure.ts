/**
 * Pressure on a group: when the group needs memory back from the members that hold cache (freed
 * blocks their pools keep charged), a member's allocator gives back what it can (emptyCache) and
 * tells its `shared.onPressure`. The group's ledger is looked at every PRESSURE_POLL_MS by one
 * timer per thread that does not keep the process alive; a look at an unchanged ledger is one read
 * of its change counter, without its lock.
 */
import { argTypeError } from '../base/errors';

/**
 * What {@link SharedBudgetOptions.onPressure} is told when pressure on the group begins.
 *
 * @category Processes
 */
export interface GroupPressureEvent {
  /**
   * `budget`: the group's charge is above a budget lowered while it runs (`cuda-memory group set`,
   * setGroupBudget), and every new allocation in the group is refused until it falls under it.
   * `request`: other members wait for room within their guaranteed requests, which only what the
   * rest borrowed can give them.
   */
  reason: 'budget' | 'request';
  /** The charge above the budget, or what the members waiting within their requests wait for. */
  bytes: number;
  /** `request`: the process ids of those members, the oldest waiter first; `budget`: empty. */
  pids: number[];
  /** The group's name. */
  group: string;
  /**
   * What this allocator gave back for it before the call (its emptyCache): 0 where
   * releaseOnPressure is false, or for `request` where it holds no more than its own request.
   */
  releasedBytes: number;
}

/** @internal How often a member's allocator looks at its group's ledger for pressure, in ms. */
export const PRESSURE_POLL_MS = 50;

/** @internal What a member's allocator does on pressure (from its shared options). */
export interface PressureWatch {
  group: string;
  onPressure: ((event: GroupPressureEvent) => void) | undefined;
  release: boolean;
  current: GroupPressureEvent['reason'] | null;
}

/** @internal The shared options of pressure, checked. */
export function pressureWatch(name: string, onPressure: unknown, releaseOnPressure: unknown): PressureWatch {
  if (onPressure !== undefined && typeof onPressure !== 'function')
    throw argTypeError(`Expected a function or undefined for shared.onPressure, but received ${typeof onPressure}`);
  if (releaseOnPressure !== undefined && typeof releaseOnPressure !== 'boolean')
    throw argTypeError(`Expected a boolean or undefined for shared.releaseOnPressure, but received ${typeof releaseOnPressure}`);
  return { group: name, onPressure: onPressure as PressureWatch['onPressure'], release: releaseOnPressure !== false, current: null };
}

interface Polled {
  readonly closed: boolean;
  _pollPressure(): void;
}

// The watched allocators of this thread, held weakly: one left to the garbage collector leaves
// the set with it, and the timer stops when the set is empty.
const watched = new Set<WeakRef<Polled>>();
let timer: ReturnType<typeof setInterval> | undefined;

/** @internal Looks at `a`'s group for pressure from now on, until it closes. */
export function watchPressure(a: Polled): void {
  watched.add(new WeakRef(a));
  if (timer === undefined) {
    timer = setInterval(poll, PRESSURE_POLL_MS);
    timer.unref();
  }
}

function poll(): void {
  for (const ref of watched) {
    const a = ref.deref();
    if (!a || a.closed) {
      watched.delete(ref);
      continue;
    }
    try {
      a._pollPressure();
    } catch {
      // The ledger could not be read now (its lock busy, the group's file gone): the next look
      // tries again, and the allocator's own calls report what is wrong.
    }
  }
  if (watched.size === 0 && timer !== undefined) {
    clearInterval(timer);
    timer = undefined;
  }
}
