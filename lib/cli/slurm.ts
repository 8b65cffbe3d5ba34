/**
 * `cuda-memory slurm task-prolog` and `cuda-memory slurm epilog`: Slurm's hooks. Slurm schedules
 * GPU memory (shards of a GPU, or a counted `gpumem` GRES) and fences nothing; the task prolog
 * turns the job's allocation on this node into a group budget (budgetFromAllocation, the rule
 * every scheduler shares) and starts each task as a member of the job's group: it prints the
 * `export` lines Slurm sets in the task's environment (CUDA_MEMORY_GROUP=slurm-<job id>, the
 * budget, the interposer first in LD_PRELOAD). Every step of a job joins the same group at the
 * same budget. The epilog, run as root when the job ends, removes the group's files from the job
 * user's folder, and never fails (a failing Epilog drains the node). See docs/slurm.md.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { budgetFromAllocation } from '../allocator/allocation';
import type { GpuAllocation, GpuGrant } from '../allocator/allocation';
import { listGroups } from '../allocator/group';
import { preloadLibraryPath, withPreload } from '../allocator/member';
import { printable } from '../base/printable';
import { shmDir } from '../base/shm';
import { parseSize } from '../base/units';
import { devices, status } from '../device/discovery';
import { Usage } from './common';
import { integer, wrap } from './options';

/** The group of Slurm job `id`. */
export function slurmGroupName(jobId: string): string {
  return `slurm-${jobId}`;
}

/** A job id as Slurm gives it to a job (SLURM_JOB_ID): decimal digits. */
const JOB_ID = /^[1-9][0-9]{0,15}$/;

// ---- what `scontrol show job -d` says of a node --------------------------------------------------

/** One GRES of a job on one node, as `scontrol show job -d` writes it. */
export interface NodeGres {
  name: string;
  /** The GRES's type where one is given (`gpu:h200:1`). */
  type: string | null;
  /** The count: shards, GPUs, or bytes of a counted GRES. */
  count: number;
  /** The indices of the node's GPUs (gres.conf's files) it was given on; empty for a counted GRES. */
  indices: number[];
  /** As written, for people. */
  text: string;
}

/**
 * @internal The names in a Slurm hostlist: "node[01-03,7],gpu5" -> node01 node02 node03 node7
 * gpu5. A range past 4096 names, or a malformed list, gives what was read up to it.
 */
export function expandHostlist(list: string): string[] {
  const out: string[] = [];
  for (const part of splitOutside(list, ',', '[', ']')) {
    const m = /^([^[\]]*)\[([^\]]*)\](.*)$/.exec(part);
    if (!m) {
      if (part) out.push(part);
      continue;
    }
    for (const r of m[2].split(',')) {
      const [a, b = a] = r.split('-');
      if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return out;
      const lo = Number(a);
      const hi = Number(b);
      if (hi < lo || hi - lo > 4096) return out;
      for (let n = lo; n <= hi; n++) out.push(`${m[1]}${String(n).padStart(a.length, '0')}${m[3]}`);
    }
  }
  return out;
}

// `text` split at `sep` where it is not between `open` and `close`.
function splitOutside(text: string, sep: string, open: string, close: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const c of text) {
    if (c === open) depth++;
    else if (c === close) depth = Math.max(0, depth - 1);
    if (c === sep && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  out.push(cur);
  return out;
}

// "0-1,3" -> [0, 1, 3]; null for anything else.
function indexList(text: string): number[] | null {
  const out: number[] = [];
  for (const r of text.split(',')) {
    const m = /^(\d{1,4})(?:-(\d{1,4}))?$/.exec(r);
    if (!m) return null;
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) return null;
    for (let i = lo; i <= hi; i++) out.push(i);
  }
  return out;
}

/**
 * @internal The GRES the job holds on `node`, from `scontrol show job -d`'s lines "Nodes=<hostlist>
 * ... GRES=<list>" (shard:2(IDX:0), gpu:h200:1(IDX:0-1), gpumem(CNT:3221225472)). Null where no
 * line names the node (a job that holds nothing there, or text that is not scontrol's).
 */
export function parseJobGres(text: string, node: string): NodeGres[] | null {
  for (const line of text.split('\n')) {
    const nodes = /^\s*Nodes=(\S+)\s/.exec(line);
    if (!nodes || !expandHostlist(nodes[1]).includes(node)) continue;
    const gres = /\sGRES=(\S*)/.exec(line);
    if (!gres || gres[1] === '' || gres[1] === '(null)') return [];
    return splitOutside(gres[1], ',', '(', ')').map(parseGresItem);
  }
  return null;
}

function parseGresItem(item: string): NodeGres {
  const bad = () => new Usage(`slurm: cannot read the GRES ${JSON.stringify(printable(item))} of scontrol show job -d`);
  // name[:type][:count](IDX:list) or name[:type](CNT:count)
  const m = /^([A-Za-z0-9_]+)((?::[^:()]+)*)(?:\((IDX|CNT):([^)]*)\))?$/.exec(item);
  if (!m) throw bad();
  const fields = m[2].split(':').slice(1);
  let type: string | null = null;
  let count: number;
  let indices: number[] = [];
  if (m[3] === 'CNT') {
    if (fields.length > 1 || !/^\d{1,16}$/.test(m[4])) throw bad();
    type = fields[0] ?? null;
    count = Number(m[4]);
  } else {
    const last = fields[fields.length - 1];
    if (last === undefined || !/^\d{1,16}$/.test(last) || fields.length > 2) throw bad();
    count = Number(last);
    type = fields.length === 2 ? fields[0] : null;
    if (m[3] === 'IDX') {
      const list = indexList(m[4]);
      if (!list) throw bad();
      indices = list;
    }
  }
  if (!Number.isSafeInteger(count)) throw bad();
  return { name: m[1], type, count, indices, text: item };
}

// ---- the task prolog ----------------------------------------------------------------------------

/** How the admin declared the node's GPUs (the task prolog's options). */
export interface SlurmNodeSchemes {
  /** Shards per GPU (gres.conf's Count for each GPU's shard line), and the GPUs cut so (null: all). */
  shards: { count: number; gpus: number[] | null } | null;
  /** The GPU the node's gpumem GRES counts, by its index in gres.conf; null: not declared (a gpumem job's memory is then on GPU 0). */
  gpumemGpu: number | null;
  /** The budget of a GPU granted whole, as a share of it (undefined: none). */
  wholeGpuFraction?: number;
}

/** The grants of a job on this node, by the node's GPU index. */
export interface NodeGrants {
  grants: Map<number, GpuGrant[]>;
  /** The job's gpumem on this node in bytes (0: none). */
  gpumemBytes: number;
}

const has = (s: SlurmNodeSchemes['shards'], gpu: number) => s !== null && (s.gpus === null || s.gpus.includes(gpu));

/**
 * @internal The job's GRES on this node as grants on each GPU, by the node's schemes: shards on the
 * GPU they are on, gpumem on the GPU it counts, a GPU given whole on itself. A GPU that a job is
 * given whole while the node promises its memory in shards or gpumem is granted twice, and so is
 * one the job holds shards of and gpumem on. Throws Usage for what the admin must declare.
 */
export function nodeGrants(gres: NodeGres[], schemes: SlurmNodeSchemes): NodeGrants {
  const grants = new Map<number, GpuGrant[]>();
  const add = (gpu: number, g: GpuGrant) => grants.set(gpu, [...(grants.get(gpu) ?? []), g]);
  let gpumemBytes = 0;
  for (const g of gres) {
    if (g.name === 'shard') {
      const shards = schemes.shards;
      if (g.indices.length !== 1)
        throw new Usage(
          `slurm: the job's ${g.text} is on ${g.indices.length} GPUs; a process is held to one GPU's budget, so shards are asked for on one GPU per node`,
        );
      if (shards === null || !has(shards, g.indices[0]))
        throw new Usage(
          `slurm: the job holds ${g.text} but this node's task prolog was not told how many shards GPU ${g.indices[0]} has (--shards COUNT, gres.conf's Count for it)`,
        );
      add(g.indices[0], { kind: 'shares', count: g.count, of: shards.count, source: `--gres=${g.text}` });
    } else if (g.name === 'gpumem') {
      gpumemBytes += g.count;
      add(schemes.gpumemGpu ?? 0, { kind: 'bytes', bytes: g.count, source: `--gres=gpumem:${g.count}` });
    } else if (g.name === 'gpu') {
      for (const i of g.indices) {
        add(i, { kind: 'whole', source: `--gres=${g.text}` });
        // The node promises this GPU's memory in a budget scheme already.
        if (has(schemes.shards, i))
          add(i, { kind: 'shares', count: schemes.shards!.count, of: schemes.shards!.count, source: 'its shards' });
        else if (i === schemes.gpumemGpu) add(i, { kind: 'bytes', bytes: 1, source: "the node's gpumem" });
      }
    }
  }
  return { grants, gpumemBytes };
}

interface TaskPrologOptions {
  gpuMemory?: number;
  shards?: SlurmNodeSchemes['shards'];
  gpumemGpu?: number;
  wholeGpuFraction?: number;
  strict?: boolean;
  scontrol?: string;
}

/** What the task prolog prints: Slurm sets each `export NAME=value` in the task's environment. */
export function exportLines(vars: [string, string][]): string {
  // Slurm reads a line to its end: a value with a line break could set another variable.
  return vars.map(([k, v]) => `export ${k}=${v.replace(/[\r\n]/g, ' ')}\n`).join('');
}

const shardsOption = (v: string): SlurmNodeSchemes['shards'] => {
  const m = /^(\d{1,7})(?:@([\d,-]+))?$/.exec(v.trim());
  const count = m ? Number(m[1]) : NaN;
  const gpus = m?.[2] === undefined ? null : indexList(m[2]);
  if (!m || count < 1 || count > 2 ** 20 || (m[2] !== undefined && gpus === null))
    throw new InvalidArgumentError('Expected COUNT or COUNT@GPUS (8, or 8@0,1: the GPUs by their index in gres.conf).');
  return { count, gpus };
};

const share = (v: string): number => {
  const f = v.trim() === '' ? NaN : Number(v);
  if (!(f > 0 && f <= 1)) throw new InvalidArgumentError('Expected a number in (0, 1], a share of the GPU’s memory.');
  return f;
};

export function register(program: Command): void {
  const slurm = program
    .command('slurm')
    .description("Slurm's hooks: the job's GPU memory (shards, a gpumem GRES) as a group budget that holds its tasks (docs/slurm.md)");
  slurm
    .command('task-prolog')
    .description("as Slurm's TaskProlog: prints the exports that make the task a member of the job's group, at the budget Slurm gave it")
    .addOption(
      new Option(
        '--gpu-memory <size>',
        "each GPU's memory, where it is not to be read from the GPU (a node whose prolog should not initialise CUDA)",
      ).argParser(wrap(parseSize)),
    )
    .addOption(
      new Option('--shards <count[@gpus]>', "the shards of each GPU, gres.conf's Count (8, or 8@0,1 for GPUs 0 and 1 only)").argParser(
        shardsOption,
      ),
    )
    .addOption(
      new Option('--gpumem-gpu <index>', 'the GPU the node’s gpumem GRES counts, by its index in gres.conf (without it: GPU 0)').argParser(
        integer(0),
      ),
    )
    .addOption(new Option('--whole-gpu-fraction <f>', 'a budget for a GPU given whole (--gres=gpu:1), as a share of it').argParser(share))
    .option('--strict', 'members refuse what they cannot charge (CUDA_MEMORY_GROUP_STRICT=1)')
    .option('--scontrol <path>', 'the scontrol to ask for the job’s GRES (default: scontrol on PATH)')
    .addHelpText(
      'after',
      '\nPrints nothing for a job without GPU GRES on this node, or with a whole GPU and no --whole-gpu-fraction.\n' +
        'A job whose allocation would promise a GPU’s memory twice (shards and gpumem, or a GPU given whole that\n' +
        'the node shares in shards or gpumem) is refused: a line on the job’s output and exit status 1, which\n' +
        'Slurm takes as a failed task.',
    )
    .action((o: TaskPrologOptions) => {
      process.exitCode = taskProlog(o);
    });
  slurm
    .command('epilog')
    .description("as Slurm's Epilog (root): removes the job's group from the job user's folder; never fails")
    .action(() => {
      process.exitCode = epilog();
    });
}

// ---- the task prolog, step by step ---------------------------------------------------------------

function taskProlog(o: TaskPrologOptions): number {
  const env = process.env;
  const job = env.SLURM_JOB_ID ?? '';
  if (!JOB_ID.test(job)) throw new Usage(`slurm task-prolog: SLURM_JOB_ID is ${JSON.stringify(job)}: this is not a Slurm task`);
  const node = env.SLURMD_NODENAME ?? '';
  let lines: [string, string][];
  try {
    lines = taskExports(job, node, o, env);
  } catch (e) {
    const why =
      e instanceof Usage ? e.message.replace(/^slurm: /, '') : `${(e as { code?: string }).code ?? 'error'}: ${(e as Error).message}`;
    refuse(`cuda-memory slurm: job ${job} refused: ${why}`);
    return 1;
  }
  process.stdout.write(exportLines(lines));
  return 0;
}

// A refusal, where the job's user sees it: the task's standard error where the hook can reach it
// (Slurm gives a task prolog none of the task's own, but its parent holds it), and a `print` line,
// which Slurm writes to the task's standard output.
function refuse(line: string): void {
  const text = printable(line);
  try {
    const fd = fs.openSync(`/proc/${process.ppid}/fd/2`, 'a');
    fs.writeSync(fd, text + '\n');
    fs.closeSync(fd);
  } catch {
    // not this user's to open: the print line stays
  }
  process.stdout.write(`print ${text}\n`);
}

// The exports for job `job` on `node`: none for a job without GPU memory here.
function taskExports(job: string, node: string, o: TaskPrologOptions, env: NodeJS.ProcessEnv): [string, string][] {
  const gres = jobGres(job, node, o.scontrol ?? 'scontrol');
  const schemes: SlurmNodeSchemes = { shards: o.shards ?? null, gpumemGpu: o.gpumemGpu ?? null, wholeGpuFraction: o.wholeGpuFraction };
  const { grants, gpumemBytes } = nodeGrants(gres, schemes);
  if (grants.size === 0) return [];
  const visible = visibleGpus(env, gpumemBytes > 0 ? (schemes.gpumemGpu ?? 0) : null);
  const allocation: GpuAllocation[] = [];
  for (const [gpu, g] of grants) allocation.push({ gpu, totalBytes: null, grants: g });
  // Refused before any device is read: memory promised twice needs no CUDA to be seen.
  for (const a of allocation) if (a.grants.length > 1) budgetFromAllocation([a]); // throws ERR_ALLOCATION_PROMISED_TWICE
  const budgeted = allocation.filter((a) => a.grants.some((g) => g.kind !== 'whole') || schemes.wholeGpuFraction !== undefined);
  if (budgeted.length === 0) return [];
  if (budgeted.length > 1)
    throw new Usage(
      `slurm: the job's memory is on ${budgeted.length} GPUs of this node (${budgeted.map((a) => a.gpu).join(', ')}); a process is held to one GPU's budget: ask for GPU memory on one GPU per node`,
    );
  const gpu = budgeted[0].gpu as number;
  const ordinal = visible.order.indexOf(gpu);
  if (ordinal < 0) throw new Usage(`slurm: the job's memory is on GPU ${gpu}, which its tasks do not see (CUDA_VISIBLE_DEVICES)`);
  const device = deviceOf(ordinal, o.gpuMemory);
  const [b] = budgetFromAllocation([{ ...budgeted[0], totalBytes: device.totalBytes }], { wholeGpuFraction: schemes.wholeGpuFraction });
  if (!b || b.budgetBytes === null) return [];
  let preload: string;
  try {
    preload = preloadLibraryPath();
  } catch (e) {
    throw new Usage(`slurm: ${(e as Error).message}`);
  }
  const out: [string, string][] = [
    ['CUDA_MEMORY_GROUP', slurmGroupName(job)],
    ['CUDA_MEMORY_GROUP_BUDGET', String(b.budgetBytes)],
    ['CUDA_MEMORY_GROUP_BUDGET_SOURCE', `slurm job ${job}: ${b.source}`],
  ];
  if (device.uuid) out.push(['CUDA_MEMORY_GROUP_DEVICE', device.uuid]);
  if (visible.set !== null) out.push(['CUDA_VISIBLE_DEVICES', visible.set]);
  const shard = budgeted[0].grants.find((g) => g.kind === 'shares');
  if (shard && shard.kind === 'shares') out.push(['CUDA_MEMORY_SLURM_SHARDS_PER_GPU', String(shard.of)]);
  if (gpumemBytes > 0) out.push(['CUDA_MEMORY_SLURM_GPUMEM', String(gpumemBytes)]);
  if (o.strict) out.push(['CUDA_MEMORY_GROUP_STRICT', '1']);
  if (env.CUDA_MEMORY_SHM_DIR) out.push(['CUDA_MEMORY_SHM_DIR', env.CUDA_MEMORY_SHM_DIR]);
  out.push(['LD_PRELOAD', withPreload(preload, env.LD_PRELOAD)]);
  return out;
}

// The job's GRES on this node, asked of scontrol (Slurm gives a task its shards in its environment,
// but not a counted GRES such as gpumem).
function jobGres(job: string, node: string, scontrol: string): NodeGres[] {
  let text: string;
  try {
    text = execFileSync(scontrol, ['show', 'job', '-d', job], { encoding: 'utf8', timeout: 20000, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    const err = e as { code?: string; stderr?: string; message: string };
    throw new Usage(`slurm: ${scontrol} show job -d ${job} failed (${err.code ?? (err.stderr || err.message).trim()})`);
  }
  return parseJobGres(text, node) ?? [];
}

// The node's GPUs in the order the task's CUDA ordinals count them (SLURM_STEP_GPUS, else
// SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES), and what to set CUDA_VISIBLE_DEVICES to: for a job
// given gpumem and no GPU, the GPU its memory is on.
function visibleGpus(env: NodeJS.ProcessEnv, gpumemGpu: number | null): { order: number[]; set: string | null } {
  const given = env.SLURM_STEP_GPUS || env.SLURM_JOB_GPUS || env.CUDA_VISIBLE_DEVICES;
  if (given) {
    const order = indexList(given.replace(/\s/g, ''));
    if (order) return { order, set: null };
  }
  if (gpumemGpu !== null) {
    process.env.CUDA_VISIBLE_DEVICES = String(gpumemGpu); // for the device read below, too
    return { order: [gpumemGpu], set: String(gpumemGpu) };
  }
  return { order: [], set: null };
}

// The task's CUDA device `ordinal`: its memory and uuid, read from the GPU unless given.
function deviceOf(ordinal: number, gpuMemory: number | undefined): { totalBytes: number | null; uuid: string | null } {
  if (gpuMemory !== undefined) {
    if (ordinal !== 0)
      throw new Usage(
        `slurm: the job's memory is on its CUDA device ${ordinal}, whose uuid the interposer needs; without --gpu-memory the prolog reads it from the GPU`,
      );
    return { totalBytes: gpuMemory, uuid: null };
  }
  const st = status();
  if (!st.available) throw new Usage(`slurm: the GPU's memory cannot be read here (${st.reason}: ${st.message}); give --gpu-memory`);
  const d = devices()[ordinal];
  if (!d) throw new Usage(`slurm: the job's GPU is CUDA device ${ordinal}, but CUDA sees ${devices().length}`);
  return { totalBytes: d.totalMemory, uuid: d.uuid };
}

// ---- the epilog ---------------------------------------------------------------------------------

// Never fails: what goes wrong is said on stderr (slurmd's log), and the exit status stays 0.
function epilog(): number {
  try {
    const job = process.env.SLURM_JOB_ID ?? '';
    if (!JOB_ID.test(job)) {
      process.stderr.write(`cuda-memory slurm epilog: SLURM_JOB_ID is ${JSON.stringify(printable(job))}; nothing removed\n`);
      return 0;
    }
    if (!becomeJobUser()) return 0;
    for (const line of removeGroup(slurmGroupName(job))) process.stderr.write(`cuda-memory slurm epilog: job ${job}: ${line}\n`);
  } catch (e) {
    process.stderr.write(`cuda-memory slurm epilog: ${printable((e as Error).message)}\n`);
  }
  return 0;
}

// The epilog runs as root; the group lives in the job user's own folder, touched as that user
// (as root, a link the user put there could point the removal anywhere).
function becomeJobUser(): boolean {
  const uid = Number(process.env.SLURM_JOB_UID);
  const gid = Number(process.env.SLURM_JOB_GID ?? uid);
  if (!Number.isSafeInteger(uid) || uid < 0 || !Number.isSafeInteger(gid) || gid < 0) {
    process.stderr.write(`cuda-memory slurm epilog: SLURM_JOB_UID is not a user id; nothing removed\n`);
    return false;
  }
  if (process.geteuid?.() === uid) return true;
  try {
    process.setgroups?.([gid]);
    process.setgid?.(gid);
    process.setuid?.(uid);
  } catch (e) {
    process.stderr.write(`cuda-memory slurm epilog: cannot become user ${uid} (${(e as Error).message}); nothing removed\n`);
    return false;
  }
  return true;
}

/**
 * @internal Removes group `name` from this user's folder: its ledgers (on every device) and the
 * records beside them, each only a regular file of this user's. A member still alive (a process
 * that outlived its job) keeps what it has mapped; its group is gone for every other. Returns a
 * line per thing worth saying.
 */
export function removeGroup(name: string): string[] {
  const dir = shmDir();
  const said: string[] = [];
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return said; // no folder: no group
  }
  // Reading the ledgers clears the slots of dead members (a ledger left without one is removed).
  const live = listGroups({ lockTimeoutMs: 1000 }).groups.filter((g) => g.name === name && g.members.length > 0);
  for (const g of live)
    said.push(
      `group ${name} on ${g.device} still has ${g.members.length} live member(s) (${g.members.map((m) => m.pid).join(', ')}); removed all the same`,
    );
  const mine = names.filter((f) => f.startsWith(`cuda-memory-group.${name}.`) || f.startsWith(`cuda-memory-uncharged.${name}.`));
  for (const f of mine) {
    const file = path.join(dir, f);
    try {
      const st = fs.lstatSync(file);
      if (!st.isFile() || st.uid !== process.geteuid?.()) {
        said.push(`${file} is not a file of this user's; left`);
        continue;
      }
      fs.unlinkSync(file);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') said.push(`${file}: ${code ?? (e as Error).message}; left`);
    }
  }
  return said;
}
