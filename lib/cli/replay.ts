/** `cuda-memory replay`: a trace under other policies and device sizes, on simulated devices. */
import { Command, Option } from 'commander';
import { loadTrace } from '../allocator/trace';
import { formatReplay, parsePolicy, replayTraceWith, ReplayPolicy, ReplayResult } from '../allocator/replay';
import { TraceCliOptions, checkDeviceSize, deviceMemoryOption, policyOption, traceFileNote } from './trace-options';

interface ReplayCliOptions extends TraceCliOptions {
  findMinLimit?: boolean;
  json?: boolean;
  expect?: string;
}

export function register(program: Command): void {
  program
    .command('replay')
    .description(
      "runs a trace (cuda-memory/trace@1, or PyTorch's _snapshot() JSON) under other policies and device sizes on simulated devices",
    )
    .argument('<trace>', 'trace file')
    .addOption(policyOption())
    .addOption(deviceMemoryOption())
    .option('--find-min-limit', 'also the smallest memoryLimit each policy survives (bisection to 1 MiB; progress on stderr)')
    .option('--json', 'the results as JSON')
    .addOption(new Option('--expect <what>', 'exit 1 unless every policy survives').choices(['survives']))
    .addHelpText('after', traceFileNote)
    .action((file: string, o: ReplayCliOptions) => {
      process.exitCode = replay(file, o);
    });
}

function replay(file: string, o: ReplayCliOptions): number {
  const trace = loadTrace(file);
  checkDeviceSize(trace, o);
  const base: ReplayPolicy[] = o.policy ?? [parsePolicy('prealloc'), parsePolicy('growth')];
  const policies = o.deviceMemory ? base.flatMap((p) => o.deviceMemory!.map((d) => ({ ...p, deviceBytes: d }))) : base;
  const results = replayTraceWith(
    trace,
    policies,
    { findMinLimit: o.findMinLimit },
    o.findMinLimit ? bisectionProgress(policies.length) : undefined,
  );
  if (o.json)
    process.stdout.write(
      JSON.stringify({ trace: file, events: trace.events.length, source: trace.source ?? null, results }, null, 2) + '\n',
    );
  else {
    process.stdout.write(`${file}: ${trace.events.length} events${trace.source ? ` (${trace.source})` : ''}\n\n${formatReplay(results)}\n`);
    for (const r of results) if (r.error) process.stdout.write(`\n${r.policy}: ${r.error}\n`);
  }
  return o.expect === 'survives' ? expectSurvives(results) : 0;
}

// --find-min-limit replays the trace once per step of a bisection, per policy: a line per policy
// on stderr, redrawn at each step on a terminal.
function bisectionProgress(policies: number): (policy: number, step: number, steps: number) => void {
  const tty = process.stderr.isTTY;
  return (policy, step, steps) => {
    const line = `finding the smallest limit: policy ${policy + 1} of ${policies}, replay ${step} of about ${steps}`;
    if (tty) process.stderr.write(`\r${line}\x1b[K${step >= steps ? '\n' : ''}`);
    else if (step === 1) process.stderr.write(`${line.replace(/, replay .*/, '')}: about ${steps} replays\n`);
  };
}

function expectSurvives(results: ReplayResult[]): number {
  const failed = results.filter((r) => !r.survived);
  for (const r of failed)
    process.stderr.write(`FAIL survives: ${r.policy} ${r.failedAt === null ? 'could not start' : `failed at event ${r.failedAt}`}\n`);
  return failed.length ? 1 : 0;
}
