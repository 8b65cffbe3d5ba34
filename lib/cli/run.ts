/**
 * `cuda-memory run --group NAME [--limit SIZE | --fraction F] [--device N] -- COMMAND ...`: starts
 * any program as a member of a group budget, the interposer preloaded into it, and ends with the
 * program's exit code (128 + the signal's number if a signal ended it).
 */
import { spawn } from 'child_process';
import * as os from 'os';
import * as tty from 'tty';
import { Command, InvalidArgumentError, Option } from 'commander';
import { devices } from '../device/discovery';
import { groupStats } from '../allocator/group';
import type { GroupStats } from '../allocator/group';
import { memberEnvironment, preloadLibraryPath } from '../allocator/member';
import { CudaMemoryError } from '../base/errors';
import { checkShmName } from '../base/shm';
import { formatBytes, parseSize } from '../base/units';
import { Usage, requireGpu } from './common';
import { integer, outFile, wrap } from './options';

interface RunOptions {
  group: string;
  limit?: number;
  fraction?: number;
  device?: number;
  simulate?: number;
  trace?: string;
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
    .addOption(
      new Option(
        '--simulate <size>',
        'the group on a simulated device of this size: no GPU and no interposer; for programs of this library that join the group themselves (tests, demos)',
      ).argParser(wrap(parseSize)),
    )
    .option(
      '--trace <file>',
      "record the program's device allocations in this file (cuda-memory/trace@1, for replay --smallest-budget)",
      outFile,
    )
    .addHelpText(
      'after',
      '\nWithout --limit or --fraction the program joins the live group at its budget. The exit code is the program’s, 128 + the signal’s number if a signal ended it, 127 if it could not be found, 126 if it could not be run, 2 for a usage error or no CUDA.\n' +
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
  // The device, its key in the ledger and its size.
  if (o.limit !== undefined && o.fraction !== undefined) throw new Usage('run: --limit and --fraction were both given; choose one');
  if (o.limit !== undefined && o.limit < 256) throw new Usage(`run: --limit ${o.limit} is below the least budget, 256 bytes`);
  const simulated = o.simulate !== undefined;
  if (simulated && o.device !== undefined) throw new Usage('run: --device names a GPU; --simulate has none');
  if (simulated && o.simulate! < 1) throw new Usage('run: --simulate needs a size of at least 1 byte');
  const device = o.device ?? 0;
  let deviceKey = 'simulated';
  let totalBytes = o.simulate ?? 0;
  if (!simulated) {
    requireGpu('run');
    const list = devices();
    if (device >= list.length)
      throw new Usage(`run: --device ${device}, but CUDA sees ${list.length} device${list.length === 1 ? '' : 's'}`);
    deviceKey = list[device].uuid;
    totalBytes = list[device].totalMemory;
  }
  // The group as it stands: a budget given must be the live group's, and none given needs one.
  let live: GroupStats | null = null;
  try {
    live = groupStats(o.group, { device, simulated });
  } catch (e) {
    if ((e as CudaMemoryError).code !== 'ERR_GROUP_NOT_FOUND') throw e;
  }
  if (live && live.members.length === 0) live = null;
  let preload: string | null = null;
  if (!simulated) {
    try {
      preload = preloadLibraryPath();
    } catch (e) {
      throw new Usage(`run: ${(e as Error).message}`);
    }
  }
  const member = memberEnvironment({
    group: o.group,
    deviceKey,
    totalBytes,
    memoryLimit: o.limit,
    memoryFraction: o.fraction,
    preload,
    trace: o.trace,
  });
  if (live && member.budgetBytes !== 0 && member.budgetBytes !== live.budgetBytes)
    throw new Usage(
      `run: group ${o.group} on ${deviceKey} has a budget of ${formatBytes(live.budgetBytes)} (${live.budgetSource}) while its ${live.members.length} member${live.members.length === 1 ? '' : 's'} live, not ${formatBytes(member.budgetBytes)} (${member.budgetSource}); give the same, or neither --limit nor --fraction to join it`,
    );
  if (!live && member.budgetBytes === 0)
    throw new Usage(`run: group ${o.group} has no live member on ${deviceKey} to take its budget from; give --limit or --fraction`);
  return startMember(command, member.env);
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
