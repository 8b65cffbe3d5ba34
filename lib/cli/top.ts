/** `cuda-memory top`: group budgets now, or every so many seconds. */
import { Command } from 'commander';
import { formatGroups, listGroups } from '../allocator/group';
import { writeHpcJobMapping } from '../metrics/hpc-jobs';
import { shmDir } from '../base/shm';
import { printable } from '../base/printable';
import { Usage } from './common';
import { fileProblem } from '../base/files';
import { integer, seconds } from './options';

interface TopOptions {
  watch?: number | true;
  json?: boolean;
  count?: number;
  hpcJobMappingDir?: string;
}

export function register(program: Command): void {
  program
    .command('top')
    .description('group budgets (createAllocator shared): each group, its budget and free room, and every member process')
    .option('--watch [seconds]', 'refresh every so many seconds (default 1) until interrupted', seconds)
    .option('--count <n>', 'with --watch: stop after this many refreshes', integer(1))
    .option('--json', 'JSON (with --watch, one document per line)')
    .option(
      '--hpc-job-mapping-dir <folder>',
      "also write the groups as dcgm-exporter's HPC job mapping there (a file per GPU, named by its NVML index, a group name per line), at each refresh",
    )
    .addHelpText(
      'after',
      '\nExit status 1 where a file of the shared folder could not be read (a damaged or foreign ledger, say): each is listed as unreadable, with why, after the groups that could be read.',
    )
    .action(async (o: TopOptions) => {
      process.exitCode = await top(o);
    });
}

// Group budgets now, or every `interval` seconds (`count` times, or until interrupted). With
// --json, one JSON document per refresh, one per line.
async function top(o: TopOptions): Promise<number> {
  if (o.count !== undefined && o.watch === undefined) throw new Usage('--count counts the refreshes of --watch; give --watch too');
  const interval = o.watch === undefined ? 0 : o.watch === true ? 1 : o.watch;
  const clear = interval > 0 && !o.json && process.stdout.isTTY;
  for (let i = 0; ; i++) {
    const list = listGroups();
    if (o.hpcJobMappingDir) {
      const dir = o.hpcJobMappingDir;
      const r = (() => {
        try {
          return writeHpcJobMapping(dir, list.groups);
        } catch (e) {
          throw new Usage(fileProblem(e, 'write the HPC job mapping in', dir));
        }
      })();
      if (r.skipped.length)
        process.stderr.write(
          printable(`cuda-memory top: not in the HPC job mapping (no GPU index for them): ${r.skipped.join(', ')}`) + '\n',
        );
    }
    if (o.json) process.stdout.write(JSON.stringify({ time: new Date().toISOString(), dir: shmDir(), ...list }) + '\n');
    else
      process.stdout.write(
        `${clear ? '\x1b[H\x1b[2J' : ''}${interval > 0 ? `cuda-memory top: ${printable(shmDir())}, every ${interval} s (Ctrl-C stops)\n` : ''}${formatGroups(list)}\n`,
      );
    if (interval === 0 || (o.count !== undefined && i + 1 >= o.count)) return list.unreadable.length ? 1 : 0;
    if (!o.json && !clear) process.stdout.write('\n');
    await new Promise((r) => setTimeout(r, interval * 1000));
  }
}
