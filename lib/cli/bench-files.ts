/** `cuda-memory bench-files --dir DIR`: the file benchmark (lib/bench/files.ts) from the command line. */
import { Command, Option } from 'commander';
import * as os from 'os';
import { runFilesBenchmark, filesGateSource } from '../bench/files';
import type { FilesReport } from '../bench/files';
import { formatFilesTable, formatFilesCsv, renderFilesHtml, filesJunit } from '../report/files';
import { filesFamilies } from '../metrics/families';
import { parseGate, evaluateGates } from '../bench/gates';
import { parseSize } from '../base/units';
import { progressBar, gatesJson, Usage } from './common';
import { collect, integer, wrap } from './options';
import { addReportOptions, printReport, writeReportFiles } from './reports';
import type { ReportFlags } from './reports';

interface BenchFilesOptions extends ReportFlags {
  dir: string;
  size?: number;
  iterations?: number;
  warmup?: number;
  device?: number;
  fsync: boolean;
}

// A folder that cannot take the test file is a usage error naming it: the user picks another.
// (The folder exists: the options are checked first. A folder that exists and still gives
// ENOENT is one of a file system that holds no files of ours, /proc say.)
const DIR_PROBLEMS: Record<string, [what: string, todo: string]> = {
  ERR_FILE_PERMISSION: ['it cannot be written (permission denied, or a read-only file system)', 'choose a folder this user may write'],
  ERR_FILE_NO_SPACE: ['there is not enough space for the test file', 'free space there, give a smaller --size, or choose another folder'],
  ERR_FILE_NOT_FOUND: ['no file can be made in it', 'choose a folder on the storage to measure'],
};

// Ctrl-C, a kill or a closed terminal stops the run between two passes: the test file (of
// --size, 1 GiB by default) and its folder are removed, and the command then ends by the same
// signal, so its status is the signal's (130 for SIGINT, 143 for SIGTERM). A second signal ends
// it at once.
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

async function benchFiles(o: BenchFilesOptions): Promise<number> {
  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    stoppedBy = signal;
    for (const s of STOP_SIGNALS) process.removeListener(s, onSignal);
    stop.abort(signal);
  };
  for (const s of STOP_SIGNALS) process.on(s, onSignal);
  let report: FilesReport;
  try {
    report = await runFilesBenchmark({
      dir: o.dir,
      bytes: o.size,
      iterations: o.iterations,
      warmup: o.warmup,
      device: o.device,
      fsync: o.fsync,
      onProgress: progressBar(),
      signal: stop.signal,
    });
  } catch (e) {
    if (stoppedBy) return endBySignal(stoppedBy);
    const { code, errno } = e as { code?: unknown; errno?: unknown };
    const why = typeof code === 'string' ? DIR_PROBLEMS[code] : undefined;
    if (why) throw new Usage(`--dir ${JSON.stringify(o.dir)}: ${why[0]}${typeof errno === 'string' ? ` (${errno})` : ''}; ${why[1]}`);
    throw e;
  } finally {
    for (const s of STOP_SIGNALS) process.removeListener(s, onSignal);
  }
  const gates = evaluateGates(o.expect ?? [], filesGateSource(report));
  const json = JSON.stringify({ ...report, gates: gatesJson(gates) }, null, 2);
  printReport(
    o,
    json,
    () => formatFilesCsv(report),
    () => formatFilesTable(report) + '\n',
  );
  writeReportFiles(o, json, {
    html: () => renderFilesHtml(report, gates),
    junit: () => filesJunit(report, gates),
    families: () => filesFamilies(report, gates),
  });
  for (const g of gates) process.stderr.write(g.message + '\n');
  const unverified = report.results.filter((r) => !r.verified);
  for (const r of unverified) process.stderr.write(`FAIL data check: ${r.direction} ${r.mode} did not arrive intact\n`);
  return gates.every((g) => g.pass) && unverified.length === 0 ? 0 : 1;
}

// The run was stopped and has cleaned up: say so, then end by the signal itself (its default
// action, now that no handler is left), as a program that had not caught it would.
function endBySignal(signal: NodeJS.Signals): number {
  process.stderr.write(
    `${process.stderr.isTTY ? '\n' : ''}cuda-memory bench-files: stopped by ${signal}; the test file and its folder were removed\n`,
  );
  process.kill(process.pid, signal);
  return 128 + (os.constants.signals[signal] ?? 0);
}

export function register(program: Command): void {
  const command = program
    .command('bench-files')
    .description('file benchmark: a file into device memory and back, cold and warm, against fs.readFile + copy() and the storage alone')
    .requiredOption('--dir <folder>', 'the folder to write the test file in (on the storage to measure)')
    .option('--size <size>', 'file size (default 1GiB)', wrap(parseSize))
    .option('--iterations <n>', 'timed passes per row (default 5)', integer(1))
    .option('--warmup <n>', 'untimed passes before warm rows (default 1)', integer(0))
    .addOption(new Option('--device <n>', 'device index').argParser(integer(0)))
    .option('--no-fsync', 'time writes without fsync (the page cache, not the storage)');
  addReportOptions(command, 'the JSON report on stdout instead of the table')
    .option(
      '--expect <gate>',
      "a gate such as 'read.library-cold>=3GB/s' or 'read.library-warm/read.naive-warm>=2'; repeatable",
      collect(wrap(parseGate)),
    )
    .action(async (o: BenchFilesOptions) => {
      process.exitCode = await benchFiles(o);
    });
}
