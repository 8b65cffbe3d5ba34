/** `cuda-memory bench-alloc`: pooled alloc+free against cudaMalloc, the pinned pool against cudaMallocHost. */
import { Command, Option } from 'commander';
import { runAllocBenchmark, formatAllocReport } from '../bench/alloc';
import { status } from '../device/discovery';
import { requireGpu } from './common';
import { integer } from './options';

/**
 * The most timed pairs per row: the recording row keeps two trace events a pair in memory, so a
 * million pairs already hold about 100 MB of trace.
 */
export const MAX_PAIRS = 1_000_000;

export function register(program: Command): void {
  program
    .command('bench-alloc')
    .description('allocator benchmark: pooled alloc+free against cudaMalloc, the pinned pool against cudaMallocHost')
    .option('--json', 'JSON on stdout')
    .addOption(new Option('--device <n>', 'device index').argParser(integer(0)))
    .option(
      '--pairs <n>',
      `timed alloc+free pairs per row, 1 to ${MAX_PAIRS.toLocaleString('en-US')}, after 100,000 warm-up (default 200000)`,
      integer(1, MAX_PAIRS),
    )
    .action(async (o: { json?: boolean; device?: number; pairs?: number }) => {
      // Without CUDA, --json still gets a report, saying why (then one line on stderr, exit 2).
      const st = status();
      if (!st.available && o.json)
        process.stdout.write(
          JSON.stringify(
            { schema: 'cuda-memory/alloc-benchmark@1', available: false, reason: st.reason, message: st.message, rows: [] },
            null,
            2,
          ) + '\n',
        );
      requireGpu('bench-alloc');
      const report = await runAllocBenchmark({ device: o.device, pairs: o.pairs });
      process.stdout.write(o.json ? JSON.stringify(report, null, 2) + '\n' : formatAllocReport(report) + '\n');
      process.exitCode = 0;
    });
}
