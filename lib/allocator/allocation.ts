/**
 * A cluster scheduler's allocation of GPU memory turned into group budgets, one per GPU. What a
 * scheduler grants on a GPU is one of three things: a share of it (Slurm's shards: N of the GPU's
 * Count), a number of bytes (a counted `gpumem` GRES; a Kubernetes DRA claim of memory), or the
 * whole GPU. The scheduler's hook reads its own variables into these grants; the rule that makes
 * budgets of them is here, the same for every scheduler: a share is that part of the GPU's memory,
 * rounded down; bytes are the budget; a whole GPU has no budget unless the admin sets one; and a
 * GPU granted twice (two grants on one GPU, say shards and gpumem) is refused, since its memory
 * would then be promised twice.
 */
import { CudaMemoryError, invalidArgument } from '../base/errors';
import { formatBytes } from '../base/units';
import { checkObjects, checkOptions, checkSize } from '../base/validate';

/**
 * What a scheduler grants on one GPU.
 *
 * @category Processes
 */
export type GpuGrant =
  /** `count` of the GPU's `of` equal shares (Slurm: `--gres=shard:2` of gres.conf's `Count=8`). */
  | { kind: 'shares'; count: number; of: number; source: string }
  /** A number of bytes of the GPU's memory (a counted `gpumem` GRES, a DRA claim). */
  | { kind: 'bytes'; bytes: number; source: string }
  /** The whole GPU (`--gres=gpu:1`). */
  | { kind: 'whole'; source: string };

/**
 * One GPU of an allocation, as a scheduler's hook reads it.
 *
 * @category Processes
 */
export interface GpuAllocation {
  /** The GPU as the job's processes see it: its CUDA ordinal (0 for the first visible), or a uuid. */
  gpu: number | string;
  /** The GPU's total memory; null where it is not known (then only byte grants can be budgets). */
  totalBytes: number | null;
  /** What the scheduler granted on it; more than one grant is refused. */
  grants: GpuGrant[];
}

/**
 * Options of {@link budgetFromAllocation}.
 *
 * @category Processes
 */
export interface AllocationBudgetOptions {
  /**
   * The budget of a GPU granted whole, as a share of its memory in (0, 1]; absent: none (the job
   * has the GPU to itself).
   */
  wholeGpuFraction?: number;
}

/**
 * The budget one GPU gets.
 *
 * @category Processes
 */
export interface GpuBudget {
  gpu: number | string;
  /** The group budget in bytes; null: none (a whole GPU the admin set no budget for). */
  budgetBytes: number | null;
  /** How it was reached, for people: "2 of 8 shards of 140 GiB (--gres=shard:2)". */
  source: string;
}

/** The least budget the group ledger takes (one request's rounding). */
const LEAST_BUDGET = 256;

/**
 * The budgets of an allocation: one per GPU that has a grant. Throws CudaMemoryError
 * `ERR_ALLOCATION_PROMISED_TWICE` where one GPU has more than one grant, and
 * `ERR_ALLOCATION_INVALID` for a grant that cannot be a budget (more shares than the GPU has, more
 * bytes than it has, shares of a GPU whose memory is not known, a budget below 256 bytes); the
 * message names the GPU and the grants. Pure: the same allocation gives the same budgets.
 *
 * ```js
 * budgetFromAllocation([{ gpu: 0, totalBytes: 8 * 2 ** 30, grants: [{ kind: 'shares', count: 2, of: 8, source: 'shard:2' }] }]);
 * // [{ gpu: 0, budgetBytes: 2147483648, source: '2 of 8 shards of 8 GiB (shard:2)' }]
 * ```
 *
 * @category Processes
 */
export function budgetFromAllocation(allocation: GpuAllocation[], options?: AllocationBudgetOptions): GpuBudget[] {
  const o = checkOptions<AllocationBudgetOptions>('options', options);
  const whole = o.wholeGpuFraction;
  if (whole !== undefined && (typeof whole !== 'number' || !(whole > 0 && whole <= 1)))
    throw invalidArgument('options.wholeGpuFraction', 'a number in (0, 1]', whole, typeof whole === 'number' ? RangeError : TypeError);
  const gpus = checkObjects('allocation', 'GPUs as { gpu, totalBytes, grants }', allocation) as Partial<GpuAllocation>[];
  const seen = new Set<string>();
  const out: GpuBudget[] = [];
  gpus.forEach((g, i) => {
    const gpu = checkGpu(`allocation[${i}].gpu`, g.gpu);
    if (seen.has(String(gpu))) throw invalidArgument(`allocation[${i}].gpu`, 'each GPU once', gpu, RangeError);
    seen.add(String(gpu));
    const total = g.totalBytes === null ? null : checkSize(`allocation[${i}].totalBytes`, g.totalBytes, 1);
    const grants = checkObjects(`allocation[${i}].grants`, 'grants as { kind, ... }', g.grants).map((x, j) =>
      checkGrant(`allocation[${i}].grants[${j}]`, x),
    );
    if (grants.length === 0) return;
    if (grants.length > 1)
      throw new CudaMemoryError(
        `GPU ${gpu} is granted ${grants.length} times (${grants.map((x) => x.source).join(', ')}): its memory would be promised ${grants.length === 2 ? 'twice' : `${grants.length} times`}. One scheme per GPU: shares, bytes or the whole GPU`,
        'ERR_ALLOCATION_PROMISED_TWICE',
      );
    out.push(budgetOf(gpu, total, grants[0], whole));
  });
  return out;
}

function budgetOf(gpu: number | string, total: number | null, grant: GpuGrant, whole: number | undefined): GpuBudget {
  const invalid = (why: string) => new CudaMemoryError(`GPU ${gpu}: ${grant.source} ${why}`, 'ERR_ALLOCATION_INVALID');
  const of = total === null ? '' : ` of ${formatBytes(total)}`;
  let budget: number;
  let source: string;
  if (grant.kind === 'whole') {
    if (whole === undefined) return { gpu, budgetBytes: null, source: `the whole GPU (${grant.source}), no budget` };
    if (total === null) throw invalid('asks for a share of the GPU, whose memory is not known');
    budget = Math.floor(total * whole);
    source = `the whole GPU (${grant.source}), budget ${whole} of ${formatBytes(total)}`;
  } else if (grant.kind === 'shares') {
    if (grant.count > grant.of) throw invalid(`is ${grant.count} shares of a GPU cut into ${grant.of}`);
    if (total === null) throw invalid('is a share of the GPU, whose memory is not known');
    // Exact in integers: total × count / of, rounded down (total < 2^53 and count ≤ of < 2^20).
    budget = Number((BigInt(total) * BigInt(grant.count)) / BigInt(grant.of));
    source = `${grant.count} of ${grant.of} shards${of} (${grant.source})`;
  } else {
    if (total !== null && grant.bytes > total) throw invalid(`is ${formatBytes(grant.bytes)}, more than the GPU's ${formatBytes(total)}`);
    budget = grant.bytes;
    source = `${formatBytes(grant.bytes)}${of} (${grant.source})`;
  }
  if (budget < LEAST_BUDGET) throw invalid(`is a budget of ${budget} bytes, below the least, ${LEAST_BUDGET} bytes`);
  return { gpu, budgetBytes: budget, source };
}

function checkGpu(name: string, v: unknown): number | string {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === 'string' && /^[A-Za-z0-9-]{1,96}$/.test(v)) return v;
  throw invalidArgument(name, 'a CUDA ordinal (an integer from 0) or a GPU uuid', v);
}

const SHARE_LIMIT = 2 ** 20;

function checkGrant(name: string, value: object): GpuGrant {
  const g = value as Partial<{ kind: unknown; count: unknown; of: unknown; bytes: unknown; source: unknown }>;
  const source = g.source === undefined ? String(g.kind) : g.source;
  if (typeof source !== 'string') throw invalidArgument(`${name}.source`, 'a string', g.source);
  const count = (k: 'count' | 'of', min: number) => {
    const v = g[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > SHARE_LIMIT)
      throw invalidArgument(`${name}.${k}`, `an integer from ${min} to 2^20`, v, typeof v === 'number' ? RangeError : TypeError);
    return v;
  };
  switch (g.kind) {
    case 'shares':
      return { kind: 'shares', count: count('count', 1), of: count('of', 1), source };
    case 'bytes':
      return { kind: 'bytes', bytes: checkSize(`${name}.bytes`, g.bytes, 1), source };
    case 'whole':
      return { kind: 'whole', source };
    default:
      throw invalidArgument(`${name}.kind`, "'shares', 'bytes' or 'whole'", g.kind);
  }
}
