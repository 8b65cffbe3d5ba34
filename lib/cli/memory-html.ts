/** `cuda-memory memory-html`: a trace or PyTorch snapshot drawn as one self-contained HTML page. */
import * as path from 'path';
import { Command } from 'commander';
import { loadTrace } from '../allocator/trace';
import { renderMemoryHtml } from '../report/memory-html';
import { Usage, writeOutput } from './common';
import { outFile } from './options';
import { TraceCliOptions, deviceMemoryOption, policyOption, traceFileNote } from './trace-options';

export function register(program: Command): void {
  program
    .command('memory-html')
    .description(
      'draws a trace or PyTorch snapshot as one self-contained HTML page: active memory timeline, pool size and limit, regions at the end',
    )
    .argument('<trace>', 'trace file')
    .requiredOption('--out <file>', 'the HTML file to write', outFile)
    .addOption(policyOption())
    .addOption(deviceMemoryOption())
    .addHelpText('after', `\nOne --policy at most, and with it one --device-memory size at most.${traceFileNote}`)
    .action((file: string, o: TraceCliOptions & { out: string }) => {
      process.exitCode = memoryHtml(file, o);
    });
}

function memoryHtml(file: string, o: TraceCliOptions & { out: string }): number {
  if ((o.policy?.length ?? 0) > 1) throw new Usage('memory-html draws one policy: give --policy once');
  if (o.deviceMemory && !o.policy) throw new Usage('--device-memory sizes the device of a --policy replay; give a --policy too');
  if ((o.deviceMemory?.length ?? 0) > 1) throw new Usage('memory-html draws one device size: give --device-memory one size');
  const trace = loadTrace(file);
  const policy = o.policy ? { ...o.policy[0], ...(o.deviceMemory ? { deviceBytes: o.deviceMemory[0] } : {}) } : undefined;
  writeOutput(o.out, renderMemoryHtml(trace, { policy, title: `cuda-memory: ${path.basename(file)}` }));
  process.stdout.write(`wrote ${o.out} (${trace.events.length} events)\n`);
  return 0;
}
