/**
 * The allocator backends and what each one takes: one table of capabilities, from which every
 * "needs backend" refusal of createAllocator() and of an Allocator comes, with its reason. The
 * addon implements the backends behind one interface (native/allocator/backend.h).
 */
import { CudaMemoryError, argRangeError } from '../base/errors';

/**
 * Where an allocator's memory comes from. `bfc`: best-fit with coalescing over regions taken with
 * cudaMalloc (TensorFlow's BFC allocator). `async`: CUDA's stream-ordered memory pool
 * (cudaMallocFromPoolAsync / cudaFreeAsync) on a pool of the allocator's own, under the same
 * limit, statistics and errors.
 *
 * @category Allocators
 * @useDeclaredType
 */
export type AllocatorBackend = (typeof ALLOCATOR_BACKENDS)[number];

/** @internal Every backend, the default first: the one list that gives the type and the checks. */
export const ALLOCATOR_BACKENDS = ['bfc', 'async'] as const;

/** @internal Whether `name` names a backend. */
export function isAllocatorBackend(name: unknown): name is AllocatorBackend {
  return (ALLOCATOR_BACKENDS as readonly unknown[]).includes(name);
}

/**
 * @internal What only some backends do: an option of createAllocator() (`simulate`, `managed`,
 * `expandableSegments`, `shared`, `asyncDefaultPool`) or a method of Allocator (recording and
 * traces, `snapshot()`).
 */
export type BackendFeature = 'simulate' | 'managed' | 'expandableSegments' | 'shared' | 'asyncDefaultPool' | 'recording' | 'snapshot';

// What each backend takes beyond what every backend does. The BFC pool is the library's own
// policy code over regions it takes: it runs on a simulated device, carves managed memory or one
// expandable segment, charges its regions to a group and reports its blocks. CUDA's
// stream-ordered pool lives in the driver, which does none of that; it can be the device's
// default pool instead of one of its own.
const CAPABILITIES: Readonly<Record<AllocatorBackend, readonly BackendFeature[]>> = {
  bfc: ['simulate', 'managed', 'expandableSegments', 'shared', 'recording', 'snapshot'],
  async: ['asyncDefaultPool'],
};

/** @internal Whether `backend` does `feature`. */
export function supports(backend: AllocatorBackend, feature: BackendFeature): boolean {
  return CAPABILITIES[backend].includes(feature);
}

/** @internal The backends that do `feature`, quoted, for messages. */
function whichDo(feature: BackendFeature): string {
  return ALLOCATOR_BACKENDS.filter((b) => supports(b, feature))
    .map((b) => `'${b}'`)
    .join(' or ');
}

const STREAM_ORDERED = "CUDA's stream-ordered pool";

// The refusal of each feature by a backend without it, and why. `without` (managed only) names
// what managed memory was asked for with: the backend, or an option that the BFC pool cannot
// combine with it.
const REFUSALS: Readonly<Record<BackendFeature, (backend: AllocatorBackend, without?: string) => Error>> = {
  simulate: (backend) =>
    argRangeError(
      `backend '${backend}' cannot run on a simulated device: ${STREAM_ORDERED} lives in the driver, with no policy code of ours to simulate; use backend ${whichDo('simulate')} with simulate, or a GPU`,
    ),
  managed: (backend, without = `backend '${backend}'`) =>
    argRangeError(
      `managed needs backend ${whichDo('managed')} without ${without}: its regions are cudaMallocManaged allocations carved by the BFC pool`,
      'ERR_NOT_SUPPORTED',
    ),
  expandableSegments: () =>
    argRangeError(
      `expandableSegments needs backend ${whichDo('expandableSegments')}: ${STREAM_ORDERED} maps its own memory (it grows and shrinks inside the driver)`,
      'ERR_NOT_SUPPORTED',
    ),
  shared: () =>
    argRangeError(
      `shared budgets need backend ${whichDo('shared')}: ${STREAM_ORDERED} grows its reservation inside the driver, so there is no region to charge to the group before it is taken`,
      'ERR_NOT_SUPPORTED',
    ),
  asyncDefaultPool: () => argRangeError(`asyncDefaultPool applies to backend ${whichDo('asyncDefaultPool')} only`),
  recording: () => blocksNotReported('recording'),
  snapshot: () => blocksNotReported('snapshot()'),
};

function blocksNotReported(what: string): Error {
  return new CudaMemoryError(
    `${what} needs the ${whichDo('recording')} backend: ${STREAM_ORDERED} does not report its blocks and regions`,
    'ERR_NOT_SUPPORTED',
  );
}

/**
 * @internal Throws the refusal of `feature` if `backend` does not do it: a RangeError from
 * createAllocator() (ERR_NOT_SUPPORTED, or ERR_OUT_OF_RANGE for an option that only applies
 * elsewhere), a CudaMemoryError (ERR_NOT_SUPPORTED) from an Allocator's method.
 */
export function requireFeature(backend: AllocatorBackend, feature: BackendFeature): void {
  if (!supports(backend, feature)) throw REFUSALS[feature](backend);
}

/**
 * @internal The refusal of managed memory with an option the BFC pool cannot combine with it
 * (`expandableSegments`, `shared`).
 */
export function managedRefusal(without: string): Error {
  return REFUSALS.managed('bfc', without);
}
