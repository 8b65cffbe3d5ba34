/**
 * Group budgets: one memory cap that every cooperating process on a GPU honours. Allocators
 * created with the same `shared.name` on the same device charge each region they take to one
 * ledger in shared memory, and a region is only taken while the group stays within its budget.
 * A member that dies, even by SIGKILL, gets its charge back at the next use of the ledger (the
 * kernel drops its lock on its slot). See docs in the README, "Many processes, one GPU".
 */
import * as fs from 'fs';
import * as path from 'path';
import { native } from '../binding/native';
import { InterprocessError, invalidArgument, argTypeError, argRangeError, jsonText } from '../base/errors';
import { checkObjects, checkOptions, checkSize } from '../base/validate';
import { checkShmName, lockTimeoutMs, shmDir } from '../base/shm';
import { formatBytes } from '../base/units';
import type { GroupJob, GroupMember, GroupStats, UnchargedProcess } from '../base/types';
import { pressureWatch } from './pressure';
import type { GroupPressureEvent, PressureWatch } from './pressure';

export type { GroupJob, GroupMember, GroupStats, UnchargedProcess } from '../base/types';
import { printable } from '../base/printable';

/**
 * The `shared` option of createAllocator.
 *
 * @category Processes
 */
export interface SharedBudgetOptions {
  /** The group's name: the same name on the same GPU is the same group. */
  name: string;
  /** The group's budget in bytes. */
  memoryLimit?: number;
  /** The group's budget as a share of the device's total memory, in (0, 1]. */
  memoryFraction?: number;
  /**
   * How long to wait for the ledger's lock (joining, each region charged or given back, stats),
   * in milliseconds; default CUDA_MEMORY_LOCK_TIMEOUT_MS, else 5000. A wait that runs out throws
   * InterprocessError ERR_SHM_LOCK_TIMEOUT naming the file.
   */
  lockTimeoutMs?: number;
  /**
   * This member's guaranteed request in bytes: it can always take up to this much, whatever the
   * others hold, and the ledger reserves it from the moment it joins. A join whose request does
   * not fit beside the others' is refused (InterprocessError ERR_GROUP_REQUEST_TOO_LARGE). Default 0.
   */
  request?: number;
  /** The most this member may hold, in bytes, at least its request; default: the group budget. */
  memberLimit?: number;
  /**
   * How long an allocation past what the group can give now waits for room, in milliseconds
   * (0 to 86400000); default 0, refused at once. Waiters are served in arrival order; an
   * allocation waits on the thread that asked, so give a waiting member a worker or a process
   * of its own. See docs/processes.md, "Waiting, guarantees and live budgets".
   */
  waitMs?: number;
  /**
   * Called when pressure on the group begins (see {@link GroupPressureEvent}): the group's charge
   * is above a budget lowered while it runs, or other members wait for room within their
   * guaranteed requests. Called once each time it begins, after this allocator gave back what it
   * could, from a timer of this thread that looks at the ledger every 50 ms and does not keep the
   * process alive; never while this thread waits in an allocation. It runs as an event listener
   * does: an exception it throws is the process's uncaught exception.
   */
  onPressure?: (event: GroupPressureEvent) => void;
  /**
   * Whether the allocator gives back its wholly free regions (emptyCache) on pressure, at each
   * look while it lasts: for `budget` always, for `request` where it holds more than its own
   * request (then every wholly free region, those within its request too). Default true; false
   * leaves what to free to onPressure.
   */
  releaseOnPressure?: boolean;
}

/**
 * Options of {@link groupStats}.
 *
 * @category Processes
 */
export interface GroupStatsOptions {
  /** Device index; default 0. */
  device?: number;
  /** The group of allocators on simulated devices. */
  simulated?: boolean;
  /** How long to wait for the ledger's lock, in milliseconds (see {@link SharedBudgetOptions.lockTimeoutMs}). */
  lockTimeoutMs?: number;
}

/**
 * Options of {@link listGroups}.
 *
 * @category Processes
 */
export interface ListGroupsOptions {
  /**
   * How long to wait for each ledger's lock before listing it as busy, in milliseconds; default
   * CUDA_MEMORY_LOCK_TIMEOUT_MS, else 500 (a listing goes on past a busy file).
   */
  lockTimeoutMs?: number;
}

// The ledgers' names (Ledger::PathFor), and the records beside them of processes a group's budget
// does not hold (core/allocator/uncharged.h): anything else in the folder is not the library's and
// is not listed, whatever it is called.
const DEVICE_KEY = '(simulated|GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})';
const GROUP_NAME = '([A-Za-z0-9_-][A-Za-z0-9._-]{0,63})';
const LEDGER = new RegExp(`^cuda-memory-group\\.${GROUP_NAME}\\.${DEVICE_KEY}$`);
const UNCHARGED = new RegExp(`^cuda-memory-uncharged\\.${GROUP_NAME}\\.${DEVICE_KEY}\\.\\d+$`);

/** @internal The device key of a group: the GPU's uuid, or "simulated". */
export function deviceKey(device: number, simulated: boolean): string {
  return simulated ? 'simulated' : uuidOf(native.devices()[device], device);
}

function uuidOf(info: { uuid?: string } | undefined, device: number): string {
  if (!info?.uuid) throw argRangeError(`device ${device} has no uuid to name its group by`);
  return info.uuid;
}

/** The least group budget, in bytes: one request's rounding. */
const LEAST_BUDGET = 256;

/**
 * @internal A group's budget from a byte limit or a share of the device's total (neither: 0, to
 * join the group's budget), and the words that say how it was set ("memoryLimit 8 GiB",
 * "fraction 0.5 of 80 GiB"). `names` are the arguments' names in refusals.
 */
export function groupBudget(
  names: { limit: string; fraction: string },
  limit: unknown,
  fraction: unknown,
  total: () => number,
  words: [string, string],
): { budget: number; budgetSource: string } {
  if (limit !== undefined && fraction !== undefined)
    throw argRangeError(`${names.limit} and ${names.fraction} were both given; choose one`, 'ERR_INVALID_ARG_VALUE');
  if (limit !== undefined) {
    const budget = checkSize(names.limit, limit, LEAST_BUDGET);
    return { budget, budgetSource: `${words[0]} ${formatBytes(budget)}` };
  }
  if (fraction === undefined) return { budget: 0, budgetSource: '' };
  if (typeof fraction !== 'number' || !(fraction > 0 && fraction <= 1))
    throw invalidArgument(names.fraction, 'a number in (0, 1]', fraction, typeof fraction === 'number' ? RangeError : TypeError);
  const t = total();
  const budget = Math.floor(t * fraction);
  // A budget of 0 would mean "join the group's" to the ledger: a share that small is refused.
  if (budget < LEAST_BUDGET)
    throw argRangeError(
      `${names.fraction} ${fraction} of ${formatBytes(t)} is a budget of ${budget} bytes, below the least budget, ${LEAST_BUDGET} bytes`,
    );
  return { budget, budgetSource: `${words[1]} ${fraction} of ${formatBytes(t)}` };
}

/**
 * @internal The budget this process was started with for group `name` on device `key`, by
 * `cuda-memory run` or memberEnvironment: CUDA_MEMORY_GROUP_BUDGET (decimal bytes; 0 joins the
 * group's) and CUDA_MEMORY_GROUP_BUDGET_SOURCE, where CUDA_MEMORY_GROUP and
 * CUDA_MEMORY_GROUP_DEVICE name this group; the preloaded interposer reads the same variables.
 * Elsewhere, or unset: 0. A value that is not a budget is a RangeError naming the variable.
 */
export function startedBudget(name: string, key: string): { budget: number; budgetSource: string } {
  const env = process.env;
  if (env.CUDA_MEMORY_GROUP !== name || env.CUDA_MEMORY_GROUP_DEVICE !== key) return { budget: 0, budgetSource: '' };
  const text = env.CUDA_MEMORY_GROUP_BUDGET ?? '';
  const budget = /^\d{1,16}$/.test(text) ? Number(text) : NaN;
  if (text === '' || budget === 0) return { budget: 0, budgetSource: '' };
  if (!(budget >= LEAST_BUDGET && budget <= Number.MAX_SAFE_INTEGER))
    throw argRangeError(
      `Expected a number of bytes in decimal digits, from ${LEAST_BUDGET} to 2^53-1 (or 0 to join the group's budget), for CUDA_MEMORY_GROUP_BUDGET, the budget this process was started with in group '${name}' on ${key}, but received ${jsonText(text)}`,
    );
  return { budget, budgetSource: env.CUDA_MEMORY_GROUP_BUDGET_SOURCE || `limit ${formatBytes(budget)}` };
}

/**
 * @internal What createAllocator passes to the addon for `shared` (`native`), and what the
 * allocator does on pressure (`pressure`), both checked before anything is taken.
 */
export function resolveShared(value: unknown, device: number, totalBytes: number | null): { native: object; pressure: PressureWatch } {
  const s = checkOptions<SharedBudgetOptions>('shared', value);
  for (const k of Object.keys(s))
    if (!SHARED_OPTIONS.includes(k))
      throw argTypeError(
        `Unknown shared option ${JSON.stringify(k)}; expected ${SHARED_OPTIONS.slice(0, -1).join(', ')} or ${SHARED_OPTIONS[SHARED_OPTIONS.length - 1]}`,
      );
  const timeout = lockTimeoutMs('shared.lockTimeoutMs', s.lockTimeoutMs);
  const terms = memberTerms({ request: 'shared.request', memberLimit: 'shared.memberLimit', waitMs: 'shared.waitMs' }, s);
  const name = checkShmName('shared.name', s.name);
  const pressure = pressureWatch(name, s.onPressure, s.releaseOnPressure);
  // A GPU's properties, read once (a simulated device has its total given).
  const info = totalBytes === null ? (native.devices()[device] as { uuid?: string; totalMemory: number } | undefined) : undefined;
  const key = totalBytes !== null ? 'simulated' : uuidOf(info, device);
  // Neither given: the budget the process was started with as a member of this group, if any.
  const { budget, budgetSource } =
    s.memoryLimit === undefined && s.memoryFraction === undefined
      ? startedBudget(name, key)
      : groupBudget(
          { limit: 'shared.memoryLimit', fraction: 'shared.memoryFraction' },
          s.memoryLimit,
          s.memoryFraction,
          () => totalBytes ?? (info as { totalMemory: number }).totalMemory,
          ['memoryLimit', 'memoryFraction'],
        );
  return { native: { dir: shmDir(), name, device: key, budget, budgetSource, lockTimeoutMs: timeout, ...terms }, pressure };
}

const SHARED_OPTIONS = [
  'name',
  'memoryLimit',
  'memoryFraction',
  'lockTimeoutMs',
  'request',
  'memberLimit',
  'waitMs',
  'onPressure',
  'releaseOnPressure',
];

/** @internal The longest wait for room, in milliseconds: a day, as the lock's. */
export const MOST_WAIT_MS = 86400000;

/** @internal A member's terms of elastic sharing, as the ledger takes them (0: none). */
export interface MemberTerms {
  request: number;
  memberLimit: number;
  waitMs: number;
}

/**
 * @internal A member's terms, checked: request and memberLimit sizes (request ≤ memberLimit when
 * both), waitMs whole milliseconds up to a day; absent ones are 0. `names` are the arguments'
 * names in refusals.
 */
export function memberTerms(names: Record<keyof MemberTerms, string>, s: Partial<Record<keyof MemberTerms, unknown>>): MemberTerms {
  const request = s.request === undefined ? 0 : checkSize(names.request, s.request);
  const memberLimit = s.memberLimit === undefined ? 0 : checkSize(names.memberLimit, s.memberLimit, LEAST_BUDGET);
  if (memberLimit && request > memberLimit)
    throw argRangeError(
      `${names.request} (${formatBytes(request)}) is above ${names.memberLimit} (${formatBytes(memberLimit)}); a member's request must fit under its limit`,
    );
  const waitMs = s.waitMs === undefined ? 0 : checkSize(names.waitMs, s.waitMs);
  if (waitMs > MOST_WAIT_MS) throw invalidArgument(names.waitMs, `an integer from 0 to ${MOST_WAIT_MS}`, waitMs, RangeError);
  return { request, memberLimit, waitMs };
}

/**
 * @internal Why a member asking for `request` bytes could not join `live` (a group of `budget`
 * bytes) beside its members' requests, or null when it fits: the sentence names the requests
 * that hold the budget.
 */
export function requestMisfit(request: number, budget: number, live: GroupStats | null): string | null {
  const holders = (live?.members ?? []).filter((m) => m.requestBytes > 0);
  const reserved = holders.reduce((t, m) => t + m.requestBytes, 0);
  if (request <= budget - Math.min(budget, reserved)) return null;
  const named = holders.map((m) => `pid ${m.pid} ${formatBytes(m.requestBytes)}`).join(', ');
  return `a request of ${formatBytes(request)} does not fit in the budget of ${formatBytes(budget)}${holders.length ? ` beside the requests that hold ${formatBytes(reserved)} of it (${named}), which leave ${formatBytes(Math.max(0, budget - reserved))}` : ''}`;
}

/**
 * The live ledger of group `name`: budget, charge, and each member's pool and in-use bytes.
 * Throws InterprocessError ERR_GROUP_NOT_FOUND when the group has no member.
 *
 * @category Processes
 */
export function groupStats(name: string, options?: GroupStatsOptions): GroupStats {
  const { file, timeout } = groupFile(name, options);
  return withJob(native.groupRead(file, timeout));
}

// The ledger file of group `name` as options name its device, and the wait for its lock.
function groupFile(name: string, options: GroupStatsOptions | undefined): { file: string; timeout: number } {
  checkShmName('name', name);
  const o = checkOptions<GroupStatsOptions>('options', options);
  const device = o.device === undefined ? 0 : checkSize('options.device', o.device);
  const timeout = lockTimeoutMs('options.lockTimeoutMs', o.lockTimeoutMs);
  return { file: native.groupPath(shmDir(), name, deviceKey(device, o.simulated === true)), timeout };
}

/**
 * Changes the budget of live group `name` to `size` bytes while its members run, and returns
 * the group after the change. Raising takes effect at once and wakes the members that wait for
 * room; lowering below what the members hold refuses their new charges until the charge falls
 * under it (nothing already held is taken back). Never below the members' requests summed
 * (InterprocessError ERR_GROUP_BUDGET_BELOW_REQUESTS); ERR_GROUP_NOT_FOUND for a group with
 * no member.
 *
 * @category Processes
 */
export function setGroupBudget(name: string, size: number, options?: GroupStatsOptions): GroupStats {
  const budget = checkSize('size', size, LEAST_BUDGET);
  const { file, timeout } = groupFile(name, options);
  return withJob(native.setGroupBudget(file, budget, `limit ${formatBytes(budget)}, set while running`, timeout));
}

/**
 * Changes the guaranteed request of member `pid` of live group `name` to `size` bytes, and
 * returns the group after the change. Never below what the member holds
 * (InterprocessError ERR_GROUP_REQUEST_BELOW_HELD), and only as far as the budget less the
 * other members' requests (ERR_GROUP_REQUEST_TOO_LARGE); ERR_GROUP_MEMBER_NOT_FOUND for a pid
 * that is no member.
 *
 * @category Processes
 */
export function setGroupRequest(name: string, pid: number, size: number, options?: GroupStatsOptions): GroupStats {
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid < 1 || pid > 0x7fffffff)
    throw invalidArgument('pid', 'a process id, an integer from 1 to 2^31-1', pid, typeof pid === 'number' ? RangeError : TypeError);
  const request = checkSize('size', size);
  const { file, timeout } = groupFile(name, options);
  return withJob(native.setGroupRequest(file, pid, request, timeout));
}

/** The Slurm job of a group by its name (`slurm-<job id>`, as the task prolog names it), or null. */
function slurmJobId(group: string): string | null {
  const m = /^slurm-([1-9][0-9]{0,15})$/.exec(group);
  return m ? m[1] : null;
}

// The names of uids, from /etc/passwd (read once; a uid it does not list has no name).
let passwd: Map<number, string> | null = null;
function userName(uid: number): string | null {
  if (!passwd) {
    passwd = new Map();
    try {
      for (const line of fs
        .readFileSync('/etc/passwd', 'utf8')
        .slice(0, 1 << 22)
        .split('\n')) {
        const f = line.split(':');
        if (f.length >= 3 && /^\d+$/.test(f[2]) && !passwd.has(Number(f[2]))) passwd.set(Number(f[2]), f[0]);
      }
    } catch {
      // no passwd file: uids only
    }
  }
  return passwd.get(uid) ?? null;
}

/** @internal A group as read, with its scheduler's job (null for a group of no job). */
export function withJob(g: GroupStats): GroupStats {
  const id = slurmJobId(g.name);
  let job: GroupJob | null = null;
  if (id !== null) {
    let uid: number | null = null;
    try {
      uid = fs.statSync(g.path).uid;
    } catch {
      // removed meanwhile: the job without its user
    }
    job = { scheduler: 'slurm', id, uid, user: uid === null ? null : userName(uid) };
  }
  return { ...g, job };
}

/**
 * @internal What `cuda-memory run` makes sure of before it starts a member of group `name` on
 * device `key`: that the member can join. The live group is returned (null if none) once its
 * ledger was read and trusted and has a slot free; with no live group, a ledger must be makeable:
 * the folder this user's own (made if missing, as a member makes it) and room in its file system
 * for a ledger's file (one of that size made there and removed). Otherwise throws the
 * InterprocessError the member would meet: ERR_GROUP_FULL, groupStats's codes (damaged, foreign,
 * another version, untrusted, busy), ERR_SHM_NO_SPACE, each naming the file.
 */
export function groupPreflight(name: string, key: string): GroupStats | null {
  checkShmName('name', name);
  const file = native.groupPath(shmDir(), name, key);
  let live: GroupStats | null = null;
  try {
    live = native.groupRead(file, lockTimeoutMs('lockTimeoutMs', undefined));
  } catch (e) {
    if ((e as InterprocessError).code !== 'ERR_GROUP_NOT_FOUND') throw e;
  }
  if (live && live.members.length === 0) live = null; // the reader removed its file
  const { slots } = native.groupFormat();
  if (live && live.members.length >= slots)
    throw new InterprocessError(
      `the group ledger ${printable(file)} already has ${live.members.length} members, as many as a ledger holds (${slots}); another can join once one leaves`,
      { code: 'ERR_GROUP_FULL', path: file },
    );
  if (!live) native.groupProbe(file);
  return live;
}

/**
 * A ledger file that could not be read: damaged, foreign, another version, another user's or
 * open to others (ERR_SHM_UNTRUSTED), or busy (ERR_SHM_LOCK_TIMEOUT).
 *
 * @category Processes
 */
export interface UnreadableGroup {
  path: string;
  code: string;
  message: string;
}

/**
 * The processes of a group its budget does not hold, where the group has no ledger that could be
 * read (none, or one listed in `unreadable`); a group with a ledger lists them in its
 * {@link GroupStats.uncharged}.
 *
 * @category Processes
 */
export interface UnchargedGroup {
  name: string;
  /** The GPU's uuid, or "simulated". */
  device: string;
  processes: UnchargedProcess[];
}

/**
 * What {@link listGroups} finds in this user's shared-memory folder.
 *
 * @category Processes
 */
export interface GroupList {
  /** Every group with a ledger that could be read. */
  groups: GroupStats[];
  /** The ledgers that could not be read. */
  unreadable: UnreadableGroup[];
  /** Processes recorded as not held to a group's budget, for groups not in `groups`. */
  uncharged: UnchargedGroup[];
}

/**
 * Every group with a ledger in the shared-memory folder, the ledgers that could not be read, and
 * the processes that fail open for a group without a ledger to read.
 *
 * @category Processes
 */
export function listGroups(options?: ListGroupsOptions): GroupList {
  const o = checkOptions<ListGroupsOptions>('options', options);
  const timeout = lockTimeoutMs('options.lockTimeoutMs', o.lockTimeoutMs, 500);
  const dir = shmDir();
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOENT') return { groups: [], unreadable: [], uncharged: [] };
    // This user's folder, but not readable: another user's, or not a folder (the native layer
    // refuses to use it for the same reason).
    const why = `the folder ${dir} cannot be listed (${err.code ?? err.message}); it must be a directory of this user's, mode 0700`;
    return { groups: [], unreadable: [{ path: dir, code: 'ERR_SHM_UNTRUSTED', message: why }], uncharged: [] };
  }
  const groups: GroupStats[] = [];
  const unreadable: UnreadableGroup[] = [];
  for (const f of names.sort()) {
    if (!LEDGER.test(f)) continue;
    const file = path.join(dir, f);
    try {
      groups.push(withJob(native.groupRead(file, timeout) as GroupStats));
    } catch (e) {
      const err = e as InterprocessError;
      if (err.code === 'ERR_GROUP_NOT_FOUND') continue; // its last member left meanwhile
      unreadable.push({ path: file, code: err.code ?? 'ERR_GROUP_LEDGER', message: err.message });
    }
  }
  // Records of groups whose ledger was not read: one entry per group and device.
  const listed = new Set(groups.map((g) => `${g.name}\0${g.device}`));
  const others = new Map<string, UnchargedGroup>();
  for (const f of names) {
    const m = UNCHARGED.exec(f);
    if (!m || listed.has(`${m[1]}\0${m[2]}`) || others.has(`${m[1]}\0${m[2]}`)) continue;
    let processes: UnchargedProcess[] = [];
    try {
      processes = native.groupUncharged(dir, m[1], m[2]);
    } catch {
      continue; // the folder is unreadable: said above
    }
    if (processes.length) others.set(`${m[1]}\0${m[2]}`, { name: m[1], device: m[2], processes });
  }
  return { groups, unreadable, uncharged: [...others.values()] };
}

// The lines of the processes a budget does not hold, under their group.
function unchargedLines(processes: UnchargedProcess[]): string[] {
  return processes.map(
    (p) =>
      `  ${String(p.pid).padStart(8)}  ${p.strict ? 'REFUSED (strict)' : 'UNCHARGED'} since ${new Date(p.since).toISOString()}: ${p.code}, ${formatBytes(p.unchargedBytes)} in ${p.unchargedAllocations} allocation${p.unchargedAllocations === 1 ? '' : 's'}; ${p.command === null ? '-' : shortCommand(p.command)}; ${p.detail}`,
  );
}

// What the group line adds for elastic sharing: the budget its members' requests reserve, the
// burst pool the rest leaves, and the waits so far.
function elasticSummary(g: GroupStats): string {
  const reserved = g.reservedBytes ?? 0;
  const terms = reserved
    ? `; requests reserve ${formatBytes(reserved)}, burst pool ${formatBytes(Math.max(0, g.budgetBytes - reserved))}`
    : '';
  const waits = g.waits
    ? `; ${g.waits} wait${g.waits === 1 ? '' : 's'} (${g.waitsGranted} granted, ${(g.waitMsTotal / 1000).toFixed(1)} s in all)`
    : '';
  return terms + waits;
}

// The line under a member with terms of elastic sharing (a request, a limit of its own) or a wait:
// request, limit, charge, and what it waits for since when.
function memberTermsLine(m: GroupMember): string[] {
  if (!m.requestBytes && !m.memberLimitBytes && !m.waitingBytes) return [];
  const waiting = m.waitingBytes
    ? `, waiting ${formatBytes(m.waitingBytes)} since ${(Math.max(0, Date.now() - (m.waitingSince ?? Date.now())) / 1000).toFixed(1)}s`
    : '';
  return [
    `  ${''.padStart(8)}  request ${formatBytes(m.requestBytes)}, limit ${m.memberLimitBytes ? formatBytes(m.memberLimitBytes) : 'the budget'}, charged ${formatBytes(m.poolBytes)}${waiting}`,
  ];
}

// A command line as the table shows it: its first 80 characters.
function shortCommand(command: string): string {
  return command.length > 80 ? `${command.slice(0, 79)}…` : command;
}

/**
 * The table `cuda-memory top` prints: each group, then a line per member.
 *
 * @category Processes
 */
export function formatGroups(list: { groups: GroupStats[]; unreadable: UnreadableGroup[]; uncharged?: UnchargedGroup[] }): string {
  const l = checkOptions<GroupList>('list', list);
  if (list === null || list === undefined) throw invalidArgument('list', 'what listGroups() returned', list);
  checkObjects('list.groups', 'the groups listGroups() returned', l.groups);
  checkObjects('list.unreadable', 'the unreadable groups listGroups() returned', l.unreadable);
  const others = l.uncharged ?? [];
  checkObjects('list.uncharged', 'the uncharged processes listGroups() returned', others);
  const lines: string[] = [];
  if (list.groups.length === 0 && list.unreadable.length === 0 && others.length === 0) lines.push(`no groups in ${shmDir()}`);
  for (const g of list.groups) {
    const used = g.budgetBytes ? ((100 * g.chargedBytes) / g.budgetBytes).toFixed(1) : '0.0';
    const job = g.job
      ? `, ${g.job.scheduler} job ${g.job.id} of ${g.job.user ?? (g.job.uid === null ? 'an unknown user' : `uid ${g.job.uid}`)}`
      : '';
    lines.push(
      `group ${g.name} on ${g.device}${job}: budget ${formatBytes(g.budgetBytes)} (${g.budgetSource}), charged ${formatBytes(g.chargedBytes)} (${used}%), free ${formatBytes(g.freeBytes)}, ${g.members.length} member${g.members.length === 1 ? '' : 's'}${elasticSummary(g)}`,
    );
    const seen = g.members.filter((m) => m.nvmlUsedBytes !== null);
    if (seen.length)
      lines.push(
        `  NVML: the ${seen.length === g.members.length ? '' : `${seen.length} of ${g.members.length} `}members it lists use ${formatBytes(seen.reduce((t, m) => t + (m.nvmlUsedBytes as number), 0))} of the device (contexts and all)`,
      );
    lines.push(
      `  ${'pid'.padStart(8)}  ${'pool'.padStart(12)}  ${'in use'.padStart(12)}  ${'nvml used'.padStart(12)}  ${'peak pool'.padStart(12)}  ${'own limit'.padStart(12)}  ${'joined'.padEnd(24)}  command`,
    );
    for (const m of g.members)
      lines.push(
        `  ${String(m.pid).padStart(8)}  ${formatBytes(m.poolBytes).padStart(12)}  ${formatBytes(m.bytesInUse).padStart(12)}  ${(m.nvmlUsedBytes === null ? '-' : formatBytes(m.nvmlUsedBytes)).padStart(12)}  ${formatBytes(m.peakPoolBytes).padStart(12)}  ${(m.limitBytes ? formatBytes(m.limitBytes) : '-').padStart(12)}  ${new Date(m.joinedAt).toISOString().padEnd(24)}  ${m.command === null ? '-' : shortCommand(m.command)}`,
        ...memberTermsLine(m),
      );
    lines.push(...unchargedLines(g.uncharged ?? []));
  }
  for (const u of list.unreadable) lines.push(`unreadable ${u.path}: ${u.code}: ${u.message}`);
  for (const o of others) {
    lines.push(
      `group ${o.name} on ${o.device}: no ledger to read; ${o.processes.length} process${o.processes.length === 1 ? '' : 'es'} of it not held to a budget`,
    );
    lines.push(...unchargedLines(o.processes));
  }
  // Names and messages quote files of the shared folder: nothing in them reaches the terminal raw.
  return lines.map(printable).join('\n');
}
