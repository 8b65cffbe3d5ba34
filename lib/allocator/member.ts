/**
 * Any CUDA program as a group member: the interposer library (`cuda_memory_preload.so`, built and
 * shipped beside the addon), preloaded into a process, charges the device allocations it makes to
 * a group's ledger. It reads the group from the process's environment; {@link memberEnvironment}
 * computes those variables and `cuda-memory run` sets them. See docs/processes.md, "Sharing with
 * every process".
 */
import { createHash } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { packageRoot } from '../binding/native';
import { CudaMemoryError, argRangeError, invalidArgument } from '../base/errors';
import { groupBudget, memberTerms } from './group';
import type { MemberTerms } from './group';
import { checkShmName, shmDir } from '../base/shm';
import { checkBoolean, checkFilePath, checkOptions, checkSize } from '../base/validate';

/**
 * An environment, variable names to values, as `process.env` holds them (written out here so that
 * the typings need no `@types/node`).
 *
 * @category Processes
 */
export type Environment = Record<string, string | undefined>;

/** The interposer's file name. */
const FILE = 'cuda_memory_preload.so';

/**
 * @internal Where the interposer may be, in order: CUDA_MEMORY_PRELOAD where it is set (and then
 * only there), a source build, the prebuilt copy shipped in the package: the order the addon
 * itself is found in, so that the two always come from the same build.
 */
export function preloadCandidates(root: string, env: Environment): { forced: boolean; paths: string[] } {
  const forced = env.CUDA_MEMORY_PRELOAD;
  if (forced) return { forced: true, paths: [path.resolve(forced)] };
  return { forced: false, paths: [path.join(root, 'build', 'Release', FILE), path.join(root, 'prebuilds', 'linux-x64', FILE)] };
}

/** @internal {@link preloadLibraryPath} for a package at `root` and an environment. */
export function findPreloadLibrary(root: string, env: Environment): string {
  const { forced, paths } = preloadCandidates(root, env);
  for (const p of paths) if (isFile(p)) return p;
  const where = forced
    ? `CUDA_MEMORY_PRELOAD names ${paths[0]}, which is not a file`
    : `looked for ${paths.join(' and ')} (CUDA_MEMORY_PRELOAD is not set)`;
  throw new CudaMemoryError(
    `the interposer library ${FILE} was not found: ${where}. It is built with the addon (npx node-gyp rebuild) and shipped in prebuilds/linux-x64/; CUDA_MEMORY_PRELOAD may name it`,
    'ERR_PRELOAD_NOT_FOUND',
  );
}

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

/**
 * The interposer library's path: CUDA_MEMORY_PRELOAD if set, else a source build's
 * `build/Release/`, else the copy in the package's `prebuilds/linux-x64/` (the addon's order). Throws CudaMemoryError
 * `ERR_PRELOAD_NOT_FOUND` naming every place it looked.
 *
 * ```js
 * spawn('python3', ['train.py'], { env: { ...process.env, LD_PRELOAD: cm.preloadLibraryPath(), CUDA_MEMORY_GROUP: 'shared' } });
 * ```
 *
 * @category Processes
 */
export function preloadLibraryPath(): string {
  return findPreloadLibrary(packageRoot, process.env);
}

/**
 * Options of {@link memberEnvironment}.
 *
 * @category Processes
 */
export interface MemberEnvironmentOptions {
  /** The group's name. */
  group: string;
  /** The device: the GPU's uuid ("GPU-...", as `devices()[i].uuid`), or "simulated". */
  deviceKey: string;
  /** The device's total memory, for `memoryFraction` and the budget's description. */
  totalBytes: number;
  /** The group's budget in bytes. */
  memoryLimit?: number;
  /** The group's budget as a share of `totalBytes`, in (0, 1]. */
  memoryFraction?: number;
  /**
   * How the budget was set, for display (CUDA_MEMORY_GROUP_BUDGET_SOURCE), with memoryLimit: a
   * live group's `budgetSource` when joining it at its budget. Default "limit 20 GiB", or
   * "fraction 0.25 of 79.19 GiB".
   */
  budgetSource?: string;
  /**
   * Whether the interposer refuses an allocation it cannot charge instead of letting it through
   * (CUDA_MEMORY_GROUP_STRICT=1). true sets the variable, false removes it; absent leaves it as
   * in `env`.
   */
  strict?: boolean;
  /** The interposer to put first in LD_PRELOAD; null or absent: LD_PRELOAD is left as it is. */
  preload?: string | null;
  /** A file the interposer records the process's allocations in (CUDA_MEMORY_TRACE). */
  trace?: string;
  /** The member's guaranteed request in bytes (CUDA_MEMORY_GROUP_REQUEST), as createAllocator's `shared.request`. */
  request?: number;
  /** The most the member may hold, in bytes (CUDA_MEMORY_GROUP_MEMBER_LIMIT), at least its request. */
  memberLimit?: number;
  /** How long an allocation waits for room, in milliseconds (CUDA_MEMORY_GROUP_WAIT_MS), up to a day. */
  waitMs?: number;
  /** The environment to start from; default process.env. */
  env?: Environment;
}

/**
 * What a member process is started with: the environment (the group's variables set, the
 * interposer first in LD_PRELOAD) and the budget it asks for. Without memoryLimit or
 * memoryFraction the member joins the group's budget as it is (CUDA_MEMORY_GROUP_BUDGET=0), and
 * finds no group if every other member has left by then; `cuda-memory run` passes the live
 * group's budget instead (memoryLimit and budgetSource), so that its program is held to it.
 *
 * | variable | value |
 * |---|---|
 * | CUDA_MEMORY_GROUP | the group's name |
 * | CUDA_MEMORY_GROUP_DEVICE | the device's uuid, or "simulated" |
 * | CUDA_MEMORY_GROUP_BUDGET | the budget in bytes (decimal), 0 to join the group's |
 * | CUDA_MEMORY_GROUP_BUDGET_SOURCE | how it was set: "limit 20 GiB", "fraction 0.25 of 79.19 GiB" |
 * | CUDA_MEMORY_GROUP_STRICT | 1: refuse what cannot be charged (`strict`) |
 * | CUDA_MEMORY_GROUP_REQUEST | the member's guaranteed request in bytes (decimal), with `request` |
 * | CUDA_MEMORY_GROUP_MEMBER_LIMIT | the most it may hold in bytes (decimal), with `memberLimit` |
 * | CUDA_MEMORY_GROUP_WAIT_MS | how long an allocation waits for room (ms), with `waitMs` |
 * | CUDA_MEMORY_TRACE | where the interposer records, when asked |
 * | LD_PRELOAD | the interposer, then what was there |
 *
 * @category Processes
 */
export function memberEnvironment(options: MemberEnvironmentOptions): {
  env: Environment;
  budgetBytes: number;
  budgetSource: string;
} {
  const o = checkOptions<MemberEnvironmentOptions>('options', options);
  const group = checkShmName('group', o.group);
  if (typeof o.deviceKey !== 'string' || !(o.deviceKey === 'simulated' || /^GPU-[0-9a-f-]{36}$/.test(o.deviceKey)))
    throw invalidArgument('deviceKey', 'a GPU uuid ("GPU-" and 36 hex digits and dashes) or "simulated"', o.deviceKey);
  const total = checkSize('totalBytes', o.totalBytes, 1);
  const { budget: budgetBytes, budgetSource } = groupBudget(
    { limit: 'memoryLimit', fraction: 'memoryFraction' },
    o.memoryLimit,
    o.memoryFraction,
    () => total,
    ['limit', 'fraction'],
  );
  if (o.budgetSource !== undefined && (typeof o.budgetSource !== 'string' || o.memoryLimit === undefined))
    throw invalidArgument('budgetSource', 'a string given with memoryLimit', o.budgetSource);
  const strict = o.strict === undefined ? undefined : checkBoolean('strict', o.strict, false);
  const base = o.env === undefined ? process.env : checkOptions<Environment>('options.env', o.env);
  const trace = o.trace === undefined ? undefined : checkFilePath('options.trace', o.trace);
  const preload = o.preload === undefined || o.preload === null ? undefined : checkFilePath('options.preload', o.preload);
  const terms = memberTerms({ request: 'request', memberLimit: 'memberLimit', waitMs: 'waitMs' }, o);
  const env: Environment = {};
  for (const [k, v] of Object.entries(base)) if (typeof v === 'string') env[k] = v;
  env.CUDA_MEMORY_GROUP = group;
  env.CUDA_MEMORY_GROUP_DEVICE = o.deviceKey;
  const source = o.budgetSource || budgetSource;
  env.CUDA_MEMORY_GROUP_BUDGET = String(budgetBytes);
  if (source) env.CUDA_MEMORY_GROUP_BUDGET_SOURCE = source;
  else delete env.CUDA_MEMORY_GROUP_BUDGET_SOURCE;
  if (strict === true) env.CUDA_MEMORY_GROUP_STRICT = '1';
  else if (strict === false) delete env.CUDA_MEMORY_GROUP_STRICT;
  if (trace !== undefined) env.CUDA_MEMORY_TRACE = path.resolve(trace);
  if (preload) env.LD_PRELOAD = withPreload(preload, env.LD_PRELOAD);
  // The terms are this member's own: none given, none inherited from the environment.
  for (const [variable, value] of Object.entries(TERM_VARIABLES)) {
    if (terms[value]) env[variable] = String(terms[value]);
    else delete env[variable];
  }
  return { env, budgetBytes, budgetSource: source };
}

/** The variables of a member's terms, which the interposer reads. */
const TERM_VARIABLES: Record<string, keyof MemberTerms> = {
  CUDA_MEMORY_GROUP_REQUEST: 'request',
  CUDA_MEMORY_GROUP_MEMBER_LIMIT: 'memberLimit',
  CUDA_MEMORY_GROUP_WAIT_MS: 'waitMs',
};

/**
 * @internal LD_PRELOAD with the interposer first and what was there after it, once. The loader
 * splits LD_PRELOAD at spaces and colons, so a path holding either goes in as a link.
 */
export function withPreload(lib: string, current: string | undefined): string {
  const carried = preloadablePath(lib);
  const rest = (current ?? '').split(/[\s:]+/).filter((p) => p !== '' && p !== carried && p !== lib);
  return [carried, ...rest].join(':');
}

/**
 * @internal A path of the interposer that LD_PRELOAD can carry: `lib` itself, or, where it holds a
 * space or a colon (a clone in a folder named "with space"), a link to it in this user's own
 * shared-memory folder (shmDir(): made mode 0700 if missing, used only while it is a directory of
 * this user's that no other may enter), named by the file it points to. Throws
 * ERR_INVALID_ARG_VALUE where no such link can be made.
 */
export function preloadablePath(lib: string): string {
  if (!/[\s:]/.test(lib)) return lib;
  const target = path.resolve(lib);
  const dir = shmDir();
  const refuse = (why: string) =>
    argRangeError(
      `the interposer's path ${JSON.stringify(lib)} holds a space or a colon, which LD_PRELOAD cannot carry, and no link to it could be made in ${dir} (${why}); set CUDA_MEMORY_PRELOAD to a copy elsewhere`,
      'ERR_INVALID_ARG_VALUE',
    );
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    throw refuse((e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  const st = fs.lstatSync(dir);
  if (!st.isDirectory() || st.uid !== process.geteuid?.() || (st.mode & 0o077) !== 0)
    throw refuse('it is not a folder of this user’s alone');
  const link = path.join(dir, `cuda_memory_preload.${createHash('sha256').update(target).digest('hex').slice(0, 16)}.so`);
  try {
    if (fs.readlinkSync(link) === target) return link;
  } catch {
    // none yet, or not a link: made below
  }
  const tmp = `${link}.${process.pid}.tmp`;
  try {
    fs.rmSync(tmp, { force: true });
    fs.symlinkSync(target, tmp);
    fs.renameSync(tmp, link); // atomic: a process that reads the name finds a whole link
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw refuse((e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  return link;
}
