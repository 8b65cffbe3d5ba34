/** Output formats of the doctor: one line per check, and JUnit XML. */
import type { DoctorReport, DoctorDevicesReport, DoctorCheck } from '../bench/doctor';
import { renderJunit, runStateProperties } from './junit';

/**
 * One line per check.
 *
 * @category Reports
 */
export function formatDoctor(r: DoctorReport): string {
  const lines = r.checks.map((c) => `${c.status.toUpperCase().padEnd(4)} ${c.name}: ${c.detail}`);
  if (r.expectations) lines.push(`expectations: ${r.expectations.name}${r.expectations.file ? ` (${r.expectations.file})` : ''}`);
  lines.push(r.ok ? 'doctor: all checks passed' : `doctor: ${r.checks.filter((c) => c.status === 'fail').length} check(s) failed`);
  return lines.join('\n');
}

/**
 * The doctor's report as JUnit XML.
 *
 * @category Reports
 */
export function doctorJunit(r: DoctorReport): string {
  return renderJunit(
    'cuda-memory doctor',
    r.checks.map((c) => ({
      classname: 'doctor',
      name: c.name,
      seconds: c.seconds,
      failure: c.status === 'fail' ? c.detail : undefined,
      output: c.status === 'skip' ? `skipped: ${c.detail}` : c.detail,
    })),
    { ...(r.environment ? runStateProperties(r.environment) : {}), ...(r.expectations ? { expectations: r.expectations.name } : {}) },
  );
}

/**
 * Each GPU's checks under its name, then each pair's.
 *
 * @category Reports
 */
export function formatDoctorDevices(r: DoctorDevicesReport): string {
  const lines: string[] = [];
  for (const g of r.gpus) {
    lines.push(`GPU ${g.device}:`);
    for (const c of g.checks) lines.push(`  ${c.status.toUpperCase().padEnd(4)} ${c.name}: ${c.detail}`);
  }
  for (const p of r.pairs) {
    lines.push(`GPU ${p.from} -> GPU ${p.to}:`);
    for (const c of p.checks) lines.push(`  ${c.status.toUpperCase().padEnd(4)} ${c.name}: ${c.detail}`);
  }
  const failed = [...r.gpus.flatMap((g) => g.checks), ...r.pairs.flatMap((p) => p.checks)].filter((c) => c.status === 'fail').length;
  lines.push(
    r.ok
      ? `doctor: all checks passed on ${r.devices.length} GPU${r.devices.length === 1 ? '' : 's'} and ${r.pairs.length} pair${r.pairs.length === 1 ? '' : 's'}`
      : `doctor: ${failed} check(s) failed`,
  );
  return lines.join('\n');
}

/**
 * JUnit for the whole host: one testcase per GPU and one per pair, failing with the checks that failed.
 *
 * @category Reports
 */
export function doctorDevicesJunit(r: DoctorDevicesReport): string {
  const one = (classname: string, name: string, checks: DoctorCheck[]) => {
    const failed = checks.filter((c) => c.status === 'fail');
    return {
      classname,
      name,
      seconds: checks.reduce((a, c) => a + c.seconds, 0),
      failure: failed.length ? failed.map((c) => `${c.name}: ${c.detail}`).join('; ') : undefined,
      output: checks.map((c) => `${c.status.toUpperCase()} ${c.name}: ${c.detail}`).join('\n'),
    };
  };
  return renderJunit(
    'cuda-memory doctor --devices',
    [
      ...r.gpus.map((g) => one(`doctor.gpu${g.device}`, `GPU ${g.device}`, g.checks)),
      ...r.pairs.map((p) => one(`doctor.p2p`, `GPU ${p.from} -> GPU ${p.to}`, p.checks)),
    ],
    r.gpus[0]?.environment ? runStateProperties(r.gpus[0].environment) : {},
  );
}
