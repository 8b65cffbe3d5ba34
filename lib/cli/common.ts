/**
 * What every command shares: the errors that end it with exit code 2 (a usage error, no CUDA),
 * writing its output files, the progress bar and the package's version.
 */
import * as fs from 'fs';
import { status } from '../device/discovery';
import { packageVersion } from '../binding/native';
import { fileProblem } from '../base/files';
import type { GateResult } from '../bench/gates';

/** A usage error: printed as one line, exit 2. */
export class Usage extends Error {}

/** CUDA cannot be used: one line saying why, exit 2. */
export class NoCuda extends Error {}

/** Throws NoCuda unless a GPU can be used. */
export function requireGpu(command: string): void {
  const st = status();
  if (!st.available) throw new NoCuda(`cuda-memory ${command}: CUDA is not available (${st.reason}): ${st.message}`);
}

/** The package's version. */
export function version(): string {
  return packageVersion();
}

/**
 * Writes an output file (an --out, --html, --junit or --prometheus the user named). A file that
 * cannot be written is a usage error naming it, not an errno message with exit 1.
 */
export function writeOutput(file: string, write: string | ((file: string) => void)): void {
  try {
    if (typeof write === 'string') fs.writeFileSync(file, write);
    else write(file);
  } catch (e) {
    throw new Usage(fileProblem(e, 'write', file));
  }
}

/** A progress bar on stderr where it is a terminal; undefined otherwise. */
export function progressBar(): ((done: number, total: number, label: string) => void) | undefined {
  if (!process.stderr.isTTY) return undefined;
  return (done, total, label) => {
    const w = 30;
    const filled = Math.round((done / total) * w);
    process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(w - filled)}] ${done}/${total} ${label.padEnd(28)}`);
    if (done === total) process.stderr.write('\n');
  };
}

/** The JSON form of gate results, as every report carries them. */
export function gatesJson(results: GateResult[]): object[] {
  return results.map((r) => ({
    gate: r.gate.text,
    pass: r.pass,
    actual: r.actual,
    message: r.message,
    ...(r.faults ? { faults: r.faults } : {}),
  }));
}
