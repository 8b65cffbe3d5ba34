#!/usr/bin/env node
/**
 * The `cuda-memory` command: `info`, `bench` (transfer benchmark), `bench-alloc` (allocator
 * benchmark), `doctor` (CI runner check), `replay` and `memory-html` (traces), `top` (group
 * budgets), `run` (any program as a group member), each in lib/cli/<command>.ts. `cuda-memory --help` and `cuda-memory <command> --help`
 * list the options. Exit codes: 0 success, 1 a failed gate or check, 2 a usage error or no CUDA.
 */
import { CommanderError } from 'commander';
import { TraceError } from './allocator/trace';
import { applySavedStagingSettings } from './transfer/staging';
import { program } from './cli/program';
import { NoCuda, Usage } from './cli/common';

// The reader of the output went away (`info | head`, `--help | grep -q x`): end at once, quietly
// and with status 0 (the reader had what it wanted), not with an unhandled EPIPE and its stack.
// A gate's status needs its output read to the end (or sent to a file).
for (const stream of [process.stdout, process.stderr])
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });

// The same saved staged-path settings a program's require('cuda-memory') applies.
applySavedStagingSettings();

async function main(argv: string[]): Promise<number> {
  const p = program();
  if (argv.length === 0) {
    p.outputHelp();
    return 2;
  }
  await p.parseAsync(argv, { from: 'user' });
  return Number(process.exitCode ?? 0);
}

// Exit 2 for what the user can fix by asking otherwise (usage, an unreadable trace, no CUDA, a
// value the library refuses), 1 for anything else; one line each, the stack on request.
function fail(e: Error): never {
  if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2); // commander printed it
  if (e instanceof NoCuda) {
    process.stderr.write(e.message + '\n');
    process.exit(2);
  }
  process.stderr.write(`cuda-memory: ${e.message}\n`);
  if (e instanceof TraceError || e instanceof Usage) process.exit(2);
  if (process.env.CUDA_MEMORY_DEBUG) process.stderr.write(`${e.stack}\n`);
  process.exit(e instanceof RangeError || e instanceof TypeError ? 2 : 1);
}

main(process.argv.slice(2)).then((code) => process.exit(code), fail);
