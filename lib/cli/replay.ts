/** `cuda-memory replay`: a trace under other policies and device sizes, on simulated devices. */
import { Command, Option } from 'commander';
import { loadTrace } from '../allocator/trace';
import {
  formatReplay,
  parsePolicy,
  replayTraceWith,
  ReplayPolicy,
  ReplayResult,
  smallestBudget,
  SmallestBudget,
} from '../allocator/replay';
import { formatBytes } from '../base/units';
import { Usage } from './common';
import { TraceCliOptions, checkDeviceSize, deviceMemoryOption, policyOption, traceFileNote } from './trace-options';

interface ReplayCliOptions extends TraceCliOptions {
  findMinLimit?: boolean;
  smallestBudget?: boolean;
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
    .option(
      '--smallest-budget',
      "the smallest group budget the run survives: a trace of a preloaded process (cuda-memory run --trace) charged allocation by allocation (exact to the byte), a trace of this library's allocator under its policy (or each --policy, to 1 MiB)",
    )
    .option('--json', 'the results as JSON')
    .addOption(new Option('--expect <what>', 'exit 1 unless every policy survives').choices(['survives']))
    .addHelpText('after', traceFileNote)
    .action((file: string, o: ReplayCliOptions) => {
      process.exitCode = replay(file, o);
    });
}

function replay(file: string, o: ReplayCliOptions): number {
  const trace = loadTrace(file);
  if (o.smallestBudget) return smallest(file, trace, o);
  checkDeviceSize(trace, o);
  const policies = policyList(o.policy ?? [parsePolicy('prealloc'), parsePolicy('growth')], o.deviceMemory);
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

// Each policy on each device size asked for.
function policyList(base: ReplayPolicy[], sizes: number[] | undefined): ReplayPolicy[] {
  return sizes ? base.flatMap((p) => sizes.map((d) => ({ ...p, deviceBytes: d }))) : base;
}

// --smallest-budget: the answer per policy (the trace's default without --policy), and how it was found.
function smallest(file: string, trace: ReturnType<typeof loadTrace>, o: ReplayCliOptions): number {
  if (o.findMinLimit || o.expect)
    throw new Usage(
      'replay: --smallest-budget is a search of its own; it takes --policy, --device-memory and --json, not --find-min-limit or --expect',
    );
  if (o.deviceMemory && !o.policy) throw new Usage('replay: --device-memory sizes the devices of --policy policies; give --policy too');
  const policies = o.policy ? policyList(o.policy, o.deviceMemory) : [undefined];
  const results: SmallestBudget[] = policies.map((p) => smallestBudget(trace, p ? { policy: p } : {}));
  if (o.json) {
    process.stdout.write(
      JSON.stringify({ trace: file, events: trace.events.length, source: trace.source ?? null, smallestBudget: results }, null, 2) + '\n',
    );
    return 0;
  }
  process.stdout.write(`${file}: ${trace.events.length} events${trace.source ? ` (${trace.source})` : ''}\n`);
  for (const r of results) {
    const step = r.granularityBytes === 1 ? '1 byte' : formatBytes(r.granularityBytes);
    process.stdout.write(
      r.budgetBytes === null
        ? `\nno budget up to the device's size: the run fails under every one (policy ${r.policy})\n`
        : `\nsmallest budget: ${formatBytes(r.budgetBytes)} (${r.budgetBytes} bytes), to ${step}, under policy ${r.policy}\n` +
            `  ${r.replays} replays; ${r.failedAtBelow === null ? 'nothing to refuse below it' : `${step} less fails at event ${r.failedAtBelow}`}\n`,
    );
  }
  return 0;
}

function expectSurvives(results: ReplayResult[]): number {
  const failed = results.filter((r) => !r.survived);
  for (const r of failed)
    process.stderr.write(`FAIL survives: ${r.policy} ${r.failedAt === null ? 'could not start' : `failed at event ${r.failedAt}`}\n`);
  return failed.length ? 1 : 0;
}
