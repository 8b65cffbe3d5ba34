/**
 * `cuda-memory group set NAME --limit SIZE` and `--request PID=SIZE`: changes a live group's
 * budget, or a member's guaranteed request, while its members run, and prints the group after the
 * change. What the ledger refuses (a budget below the requests, a request below what the member
 * holds or past what the others leave, no such group or member) is a usage error with its message.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { formatGroups, setGroupBudget, setGroupRequest } from '../allocator/group';
import type { GroupStats, GroupStatsOptions } from '../allocator/group';
import { CudaMemoryError } from '../base/errors';
import { checkShmName } from '../base/shm';
import { parseSize } from '../base/units';
import { Usage } from './common';
import { integer, wrap } from './options';

interface SetOptions {
  limit?: number;
  request?: { pid: number; bytes: number };
  device?: number;
  simulated?: boolean;
  json?: boolean;
}

// --request PID=SIZE.
const memberRequest = (v: string): { pid: number; bytes: number } => {
  const m = /^([1-9]\d{0,9})=(.+)$/.exec(v.trim());
  if (!m || Number(m[1]) > 0x7fffffff) throw new InvalidArgumentError('Expected PID=SIZE, such as 4242=8GiB.');
  return { pid: Number(m[1]), bytes: wrap(parseSize)(m[2]) };
};

export function register(program: Command): void {
  const group = program.command('group').description('group budgets (createAllocator shared, run --group) changed while their members run');
  group
    .command('set')
    .description("changes a live group's budget or a member's guaranteed request, and prints the group after the change")
    .argument(
      '<name>',
      'the group',
      wrap((v: string) => checkShmName('name', v)),
    )
    .addOption(
      new Option(
        '--limit <size>',
        "the group's new budget, e.g. 16GiB: raising wakes the members that wait; lowering refuses new charges until the charge falls under it",
      ).argParser(wrap(parseSize)),
    )
    .addOption(new Option('--request <pid=size>', "member PID's new guaranteed request, e.g. 4242=8GiB").argParser(memberRequest))
    .addOption(new Option('--device <n>', 'the device of the group (default 0)').argParser(integer(0)))
    .option('--simulated', 'the group of allocators on simulated devices')
    .option('--json', 'the group after the change as JSON')
    .addHelpText(
      'after',
      '\nWith both --limit and --request, the budget changes first.\nExample: cuda-memory group set shared --limit 16GiB',
    )
    .action((name: string, o: SetOptions) => {
      const g = set(name, o);
      process.stdout.write(o.json ? JSON.stringify(g) + '\n' : formatGroups({ groups: [g], unreadable: [] }) + '\n');
    });
}

function set(name: string, o: SetOptions): GroupStats {
  if (o.limit === undefined && o.request === undefined) throw new Usage('group set: give --limit SIZE, --request PID=SIZE, or both');
  const where: GroupStatsOptions = { device: o.device, simulated: o.simulated === true };
  try {
    let g = o.limit !== undefined ? setGroupBudget(name, o.limit, where) : null;
    if (o.request !== undefined) g = setGroupRequest(name, o.request.pid, o.request.bytes, where);
    return g as GroupStats;
  } catch (e) {
    if (e instanceof CudaMemoryError || e instanceof RangeError || e instanceof TypeError) throw new Usage(`group set: ${e.message}`);
    throw e;
  }
}
