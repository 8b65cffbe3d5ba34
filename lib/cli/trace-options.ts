/** Options replay and memory-html share: the policies to run a trace under, the device sizes. */
import { Option } from 'commander';
import { parsePolicy, ReplayPolicy } from '../allocator/replay';
import { Trace, TRACE_MAX_BYTES } from '../allocator/trace';
import { parseSizeList, formatBytes } from '../base/units';
import { Usage } from './common';
import { collect, wrap } from './options';

export interface TraceCliOptions {
  policy?: ReplayPolicy[];
  deviceMemory?: number[];
}

export const policyOption = (): Option =>
  new Option(
    '--policy <spec>',
    'comma-separated: growth, prealloc or expandable (expandable segments, growing), fraction=0.5, limit=8GiB, gc=off; repeatable',
  ).argParser(collect(wrap(parsePolicy)));

export const deviceMemoryOption = (): Option =>
  new Option('--device-memory <list>', "simulated device sizes, e.g. 24GiB,80GiB (default: the trace's device)").argParser(
    wrap(parseSizeList),
  );

/** Said in each command's help: how much of a trace file is read. */
export const traceFileNote = `\nA trace file is read up to ${formatBytes(TRACE_MAX_BYTES)} (a larger file is refused unread; a device or pipe, once it passes that).`;

/** A trace that does not say its device's size needs --device-memory (a policy's simulate is API only). */
export function checkDeviceSize(trace: Trace, o: TraceCliOptions): void {
  if (!trace.device?.totalBytes && !o.deviceMemory)
    throw new Usage(
      trace.source?.startsWith('pytorch')
        ? "a PyTorch trace (torch.cuda.memory._snapshot()) does not record its device's size: add --device-memory with the GPU's memory, e.g. --device-memory 80GiB"
        : "the trace does not say its device's size: give one with --device-memory, e.g. --device-memory 80GiB",
    );
}
