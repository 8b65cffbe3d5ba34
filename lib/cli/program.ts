/**
 * The `cuda-memory` program: its commands, one module each, and what they share (exit codes,
 * how errors are printed, no arguments left unread).
 */
import { Command } from 'commander';
import { version } from './common';
import * as info from './info';
import * as bench from './bench';
import * as benchAlloc from './bench-alloc';
import * as benchFiles from './bench-files';
import * as doctor from './doctor';
import * as replay from './replay';
import * as memoryHtml from './memory-html';
import * as top from './top';
import * as group from './group';
import * as run from './run';
import * as slurm from './slurm';
import * as help from './help';
import * as build from './build';

/** Exit codes, as the help and the README give them. */
export const EXIT_HELP =
  '\nExit codes: 0 success; 1 a failed gate, data check or doctor check (for top: a shared file it could not read); 2 a usage error or no usable CUDA.';

export function program(): Command {
  const p = new Command('cuda-memory')
    .description('CUDA memory for Node.js: devices, transfer and allocator benchmarks, CI checks.')
    .version(version(), '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show help')
    .addHelpText('after', EXIT_HELP)
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({ outputError: (text, write) => write(`cuda-memory: ${text.replace(/^error: /, '')}`) })
    // An argument a command does not take is refused, not ignored (every command inherits this).
    .allowExcessArguments(false)
    .exitOverride();
  for (const command of [info, bench, benchAlloc, benchFiles, doctor, replay, memoryHtml, top, group, run, slurm, build, help])
    command.register(p);
  return p;
}
