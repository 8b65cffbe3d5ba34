/**
 * `cuda-memory build`: makes the addon load here, saying each step: the prebuilt binary if it
 * loads, else a source build (scripts/build-addon.js). The package has no install script, so
 * this is the one command for machines the prebuilt binary does not serve.
 */
import { Command } from 'commander';
import * as path from 'path';
import { spawnSync } from 'child_process';

export function register(program: Command): void {
  program
    .command('build')
    .description(
      'make the addon load here: the prebuilt binary if it loads, else compile from source (a CUDA toolkit if found), printing each step',
    )
    .option('--from-source', 'compile even where the prebuilt binary loads')
    .action((o: { fromSource?: boolean }) => {
      const script = path.join(__dirname, '..', '..', 'scripts', 'build-addon.js');
      const r = spawnSync(process.execPath, [script, ...(o.fromSource ? ['--from-source'] : [])], { stdio: 'inherit' });
      process.exitCode = r.status ?? 1;
    });
}
