/** JUnit XML, the form CI systems read test results in: every report's --junit file. */
import { esc } from './chart';
import type { RunState } from '../bench/run-state';

/**
 * One JUnit test case.
 *
 * @category Reports
 */
export interface JunitCase {
  name: string;
  classname: string;
  seconds: number;
  failure?: string;
  output?: string;
}

/**
 * JUnit XML for CI systems; `properties` go in the suite's `<properties>` (versions, clocks).
 *
 * @category Reports
 */
export function renderJunit(suite: string, cases: JunitCase[], properties: Record<string, string> = {}): string {
  const failures = cases.filter((c) => c.failure !== undefined).length;
  const total = cases.reduce((a, c) => a + c.seconds, 0);
  const body = cases
    .map((c) => {
      const inner =
        (c.failure !== undefined ? `<failure message="${esc(c.failure)}">${esc(c.failure)}</failure>` : '') +
        (c.output ? `<system-out>${esc(c.output)}</system-out>` : '');
      return `  <testcase classname="${esc(c.classname)}" name="${esc(c.name)}" time="${c.seconds.toFixed(6)}">${inner}</testcase>`;
    })
    .join('\n');
  const props = Object.entries(properties);
  const head = props.length
    ? `  <properties>\n${props.map(([k, v]) => `   <property name="${esc(k)}" value="${esc(v)}"/>`).join('\n')}\n  </properties>\n`
    : '';
  return `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="${cases.length}" failures="${failures}" time="${total.toFixed(6)}">\n <testsuite name="${esc(suite)}" tests="${cases.length}" failures="${failures}" time="${total.toFixed(6)}">\n${head}${body}\n </testsuite>\n</testsuites>\n`;
}

/**
 * JUnit for a run that could not start because CUDA cannot be used: one failing testcase that
 * says why, so that CI sees a failure rather than a missing file.
 *
 * @category Reports
 */
export function unavailableJunit(command: string, reason: string | null, message: string): string {
  return renderJunit(`cuda-memory ${command}`, [
    { classname: command, name: 'CUDA available', seconds: 0, failure: `CUDA is not available (${reason}): ${message}` },
  ]);
}

/**
 * The run state as JUnit properties: the versions and the clocks.
 *
 * @category Reports
 */
export function runStateProperties(s: RunState): Record<string, string> {
  const c = s.clocks;
  const out: Record<string, string> = {
    'nvidia.driver': s.nvidiaDriverVersion ?? 'unknown',
    'cuda.driver': s.cudaDriverVersion,
    'cuda.runtime': s.runtimeVersion,
    'cuda-memory.version': s.library,
  };
  if (c) {
    out['clocks.sm.mhz'] = `${c.smClockMHz ?? 'unknown'} of ${c.smClockMaxMHz ?? 'unknown'}`;
    out['clocks.memory.mhz'] = `${c.memoryClockMHz ?? 'unknown'} of ${c.memoryClockMaxMHz ?? 'unknown'}`;
    out['clocks.event_reasons'] = c.reasons.length ? c.reasons.join(', ') : 'none';
  }
  return out;
}
