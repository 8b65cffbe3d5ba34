/**
 * `cuda-memory run --group NAME [--limit SIZE | --fraction F] [--device N] [--strict]
 * [--wait DURATION] [--request SIZE] [--member-limit SIZE] -- COMMAND ...`:
 * starts any program as a member of a group budget, the interposer preloaded into it, and ends
 * with the program's exit code (128 + the signal's number if a signal ended it). Everything that
 * would keep the program from joining is a usage error before it starts.
 */
import { spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as tty from 'tty';
import { Command, InvalidArgumentError, Option } from 'commander';
import { devices } from '../device/discovery';
import { MOST_WAIT_MS, groupBudget, groupPreflight, requestMisfit } from '../allocator/group';
import type { GroupStats } from '../allocator/group';
import { preloadObstacle } from '../allocator/loader';
import { memberEnvironment, preloadLibraryPath } from '../allocator/member';
import { CudaMemoryError } from '../base/errors';
import { checkShmName } from '../base/shm';
import { printable } from '../base/printable';
import { formatBytes, parseSize } from '../base/units';
import { Usage, requireGpu } from './common';
import { duration, integer, outFile, wrap } from './options';

interface RunOptions {
  group: string;
  limit?: number;
  fraction?: number;
  device?: number;
  simulate?: number;
  trace?: string;
  strict?: boolean;
  wait?: number;
  request?: number;
  memberLimit?: number;
}

const fraction = (v: string): number => {
  const f = v.trim() === '' ? NaN : Number(v);
  if (!(f > 0 && f <= 1)) throw new InvalidArgumentError('Expected a number in (0, 1], a share of the device’s total memory.');
  return f;
};

export function register(program: Command): void {
  program
    .command('run')
    .description('starts a program (PyTorch, llama.cpp, any CUDA program) as a member of a group budget, the interposer preloaded')
    .argument('<command...>', 'the program and its arguments, after -- (everything after -- is the program’s)')
    .requiredOption('--group <name>', 'the group to join (the name groupStats, top and createAllocator shared use)', wrap(groupName))
    .addOption(new Option('--limit <size>', "the group's budget, e.g. 20GiB (a live group's must match)").argParser(wrap(parseSize)))
    .addOption(new Option('--fraction <f>', "the group's budget as a share of the device's total memory").argParser(fraction))
    .addOption(new Option('--device <n>', 'the device whose allocations are charged (default 0)').argParser(integer(0)))
    .option(
      '--strict',
      'the interposer refuses an allocation it cannot charge (no group to join, a ledger it cannot use) instead of letting it through uncharged (CUDA_MEMORY_GROUP_STRICT=1); a program it cannot be preloaded into is not started',
    )
    .addOption(
      new Option(
        '--wait <duration>',
        'an allocation past what the group can give now waits this long for room (e.g. 60s, 500ms, 2m), in arrival order, before it fails (CUDA_MEMORY_GROUP_WAIT_MS)',
      ).argParser(duration(MOST_WAIT_MS)),
    )
    .addOption(
      new Option(
        '--request <size>',
        "the program's guaranteed share, e.g. 8GiB: it can always have this much, reserved from the budget as it joins (CUDA_MEMORY_GROUP_REQUEST)",
      ).argParser(wrap(parseSize)),
    )
    .addOption(
      new Option(
        '--member-limit <size>',
        'the most the program may hold, at least its request (CUDA_MEMORY_GROUP_MEMBER_LIMIT); beyond its request it borrows from what no request reserves',
      ).argParser(wrap(parseSize)),
    )
    .addOption(
      new Option(
        '--simulate <size>',
        'the group on a simulated device of this size: no GPU and no interposer; for programs of this library that join the group themselves (tests, demos)',
      ).argParser(wrap(parseSize)),
    )
    .option(
      '--trace <file>',
      "record the program's device allocations in this file (cuda-memory/trace@1, for replay --smallest-budget; not with --simulate)",
      outFile,
    )
    .addHelpText(
      'after',
      '\nWithout --limit or --fraction the program joins the live group at its budget, and stays held to\n' +
        'that budget should the other members leave before it allocates. A group the program could not\n' +
        'join (full; its ledger damaged, foreign, of another version or not to be trusted; no room for a\n' +
        'ledger in /dev/shm or CUDA_MEMORY_SHM_DIR) is a usage error before it starts, and so is a budget\n' +
        'above the device’s total memory. A program the interposer cannot be preloaded into (set-user-ID\n' +
        'or set-group-ID, with file capabilities, or linked statically; for a script, its interpreter) is\n' +
        'named in a warning before it starts, and not started with --strict.\n' +
        'A --request that does not fit beside the requests of the live members is a usage error before\n' +
        'it starts, naming those requests.\n' +
        'The exit code is the program’s, 128 + the signal’s number if a signal ended it, 127 if it could\n' +
        'not be found, 126 if it could not be run, 2 for a usage error or no CUDA.\n' +
        'Example: cuda-memory run --group shared --limit 20GiB -- python3 train.py',
    )
    .action(async (command: string[], o: RunOptions) => {
      process.exitCode = await run(command, o);
    });
}

function groupName(v: string): string {
  return checkShmName('--group', v);
}

async function run(command: string[], o: RunOptions): Promise<number> {
  checkRunOptions(o);
  const target = theDevice(o);
  const asked = askedBudget(o, target);
  const live = joinableGroup(o.group, target.key, asked);
  const misfit = requestMisfit(o.request ?? 0, asked.budget || live!.budgetBytes, live);
  if (misfit) throw new Usage(`run: the program could not join group ${o.group} on ${target.key}: --request: ${misfit}`);
  let preload: string | null = null;
  if (!target.simulated) {
    try {
      preload = preloadLibraryPath();
    } catch (e) {
      throw new Usage(`run: ${(e as Error).message}`);
    }
  }
  // Joining the live group, the program asks for its budget (not 0, "whatever the group has"):
  // should the other members leave before its first allocation, it makes the group again at that
  // budget instead of finding none and going on unbound.
  const budget =
    asked.budget !== 0
      ? { memoryLimit: o.limit, memoryFraction: o.fraction }
      : { memoryLimit: live!.budgetBytes, budgetSource: live!.budgetSource };
  const member = memberEnvironment({
    group: o.group,
    deviceKey: target.key,
    totalBytes: target.totalBytes,
    ...budget,
    preload,
    trace: o.trace,
    strict: o.strict ? true : undefined,
    request: o.request,
    memberLimit: o.memberLimit,
    waitMs: o.wait,
  });
  if (preload) warnUnbound(command[0], member.env, o);
  if (o.trace !== undefined) freshTrace(member.env.CUDA_MEMORY_TRACE as string);
  return startMember(command, member.env);
}

// The interposer never writes over an existing trace (a worker's, or an earlier run's: it writes
// FILE.<pid> beside it), so the one the user named for this run is removed first: a regular file
// of this user's only; anything else there is left, and the program records beside it.
function freshTrace(file: string): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch {
    return;
  }
  if (!st.isFile() || st.uid !== process.geteuid?.()) {
    process.stderr.write(
      `cuda-memory run: ${printable(file)} is not a file of this user's; the program records beside it (${printable(file)}.<pid>)\n`,
    );
    return;
  }
  try {
    fs.unlinkSync(file);
  } catch (e) {
    throw new Usage(
      `run: cannot remove the earlier trace ${printable(file)} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}) to record a new one`,
    );
  }
}

// The options together.
function checkRunOptions(o: RunOptions): void {
  if (o.limit !== undefined && o.fraction !== undefined) throw new Usage('run: --limit and --fraction were both given; choose one');
  if (o.limit !== undefined && o.limit < 256) throw new Usage(`run: --limit ${o.limit} is below the least budget, 256 bytes`);
  if (o.memberLimit !== undefined && o.memberLimit < 256)
    throw new Usage(`run: --member-limit ${o.memberLimit} is below the least limit, 256 bytes`);
  if (o.request !== undefined && o.memberLimit !== undefined && o.request > o.memberLimit)
    throw new Usage(
      `run: --request ${formatBytes(o.request)} is above --member-limit ${formatBytes(o.memberLimit)}; a member's request must fit under its limit`,
    );
  if (o.simulate === undefined) return;
  if (o.device !== undefined) throw new Usage('run: --device names a GPU; --simulate has none');
  if (o.simulate < 1) throw new Usage('run: --simulate needs a size of at least 1 byte');
  if (o.trace !== undefined)
    throw new Usage(
      'run: --trace records what the interposer sees, and --simulate preloads none; a program of this library records its own allocator (allocator.startRecording())',
    );
}

interface Target {
  simulated: boolean;
  /** The device's key in the ledger: its uuid, or "simulated". */
  key: string;
  totalBytes: number;
  /** "device 0", "the simulated device". */
  name: string;
}

// The device, its key in the ledger and its size.
function theDevice(o: RunOptions): Target {
  if (o.simulate !== undefined) return { simulated: true, key: 'simulated', totalBytes: o.simulate, name: 'the simulated device' };
  requireGpu('run');
  const device = o.device ?? 0;
  const list = devices();
  if (device >= list.length) throw new Usage(`run: --device ${device}, but CUDA sees ${list.length} device${list.length === 1 ? '' : 's'}`);
  return { simulated: false, key: list[device].uuid, totalBytes: list[device].totalMemory, name: `device ${device}` };
}

// The budget asked for (0: none given), as the ledger will hold it.
function askedBudget(o: RunOptions, target: Target): { budget: number; budgetSource: string } {
  let asked: { budget: number; budgetSource: string };
  try {
    asked = groupBudget({ limit: '--limit', fraction: '--fraction' }, o.limit, o.fraction, () => target.totalBytes, ['limit', 'fraction']);
  } catch (e) {
    throw new Usage(`run: ${(e as Error).message}`);
  }
  if (asked.budget > target.totalBytes)
    throw new Usage(
      `run: --limit ${formatBytes(asked.budget)} is above ${target.name}'s total memory, ${formatBytes(target.totalBytes)}: a budget cannot bind more than the device has`,
    );
  return asked;
}

// The group as it stands (null: no live member), once the program is sure to be able to join it
// at the budget asked for: what it would meet there is said now, not in a line of its log.
function joinableGroup(group: string, key: string, asked: { budget: number; budgetSource: string }): GroupStats | null {
  let live: GroupStats | null;
  try {
    live = groupPreflight(group, key);
  } catch (e) {
    const err = e as CudaMemoryError;
    if (!(err instanceof CudaMemoryError) || !/^ERR_(GROUP|SHM)_/.test(err.code)) throw e;
    throw new Usage(`run: the program could not join group ${group} on ${key}: ${err.code}: ${err.message}`);
  }
  if (live && asked.budget !== 0 && asked.budget !== live.budgetBytes)
    throw new Usage(
      `run: group ${group} on ${key} has a budget of ${formatBytes(live.budgetBytes)} (${live.budgetSource}) while its ${live.members.length} member${live.members.length === 1 ? '' : 's'} live, not ${formatBytes(asked.budget)} (${asked.budgetSource}); give the same, or neither --limit nor --fraction to join it`,
    );
  if (!live && asked.budget === 0)
    throw new Usage(`run: group ${group} has no live member on ${key} to take its budget from; give --limit or --fraction`);
  return live;
}

// A program the loader will not preload the interposer into is not bound: said before it
// starts, and with --strict it is not started.
function warnUnbound(program: string, env: Record<string, string | undefined>, o: RunOptions): void {
  const why = preloadObstacle(program, env);
  if (why === null) return;
  const line = `the budget of group ${o.group} will not bind ${JSON.stringify(program)}: ${why}.`;
  if (o.strict) throw new Usage(`run: --strict: ${line}`);
  process.stderr.write(`cuda-memory run: warning: ${line}\n`);
}

// Signals a supervisor sends go on to the program. Where a terminal is the input, the terminal's
// own (Ctrl-C, Ctrl-\) reach the whole foreground process group, the program included, so they
// are not sent twice: this process only outlives them, waiting for the program.
const FORWARDED: NodeJS.Signals[] = ['SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGUSR2'];
const TERMINAL: NodeJS.Signals[] = ['SIGINT', 'SIGQUIT'];

function startMember(command: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(command[0], command.slice(1), { stdio: 'inherit', env });
    const fromTerminal = tty.isatty(0);
    const handlers = new Map<NodeJS.Signals, () => void>();
    for (const sig of [...FORWARDED, ...TERMINAL]) {
      const h = fromTerminal && TERMINAL.includes(sig) ? () => undefined : () => void child.kill(sig);
      handlers.set(sig, h);
      process.on(sig, h);
    }
    const done = (code: number) => {
      for (const [sig, h] of handlers) process.removeListener(sig, h);
      resolve(code);
    };
    child.once('error', (e: NodeJS.ErrnoException) => {
      const missing = e.code === 'ENOENT';
      process.stderr.write(
        `cuda-memory run: cannot start ${JSON.stringify(command[0])}: ${missing ? 'not found' : (e.code ?? e.message)}\n`,
      );
      done(missing ? 127 : 126);
    });
    child.once('exit', (code, signal) => done(code ?? 128 + (signal ? (os.constants.signals[signal] ?? 0) : 0)));
  });
}
