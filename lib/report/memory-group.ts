/**
 * The memory page's group section: for a trace recorded by a group member's allocator, the group
 * as it was when the trace was taken: its budget, what the requests reserve, the burst pool, the
 * waits so far, and per member its request, own limit, charge, bytes in use and wait.
 */
import { esc } from './chart';
import { formatBytes } from '../base/units';
import type { TraceGroup } from '../allocator/trace';

// A wait as the page says it: the bytes and how long it had lasted when the trace was taken.
function waitText(bytes: number, since: number | null, at: number): string {
  if (!bytes) return 'no';
  const lasted = since === null ? '' : ` for ${(Math.max(0, at - since) / 1000).toFixed(1)} s`;
  return `${formatBytes(bytes)}${lasted}`;
}

/** @internal The section's HTML (empty without a group). */
export function groupSection(g: TraceGroup | undefined): string {
  if (!g) return '';
  const burst = Math.max(0, g.budgetBytes - g.reservedBytes);
  const summary = [
    `budget ${formatBytes(g.budgetBytes)} (${g.budgetSource}), ${formatBytes(g.chargedBytes)} charged`,
    g.chargedBytes > g.budgetBytes ? `, ${formatBytes(g.chargedBytes - g.budgetBytes)} above the budget` : '',
    `; requests reserve ${formatBytes(g.reservedBytes)}, the burst pool is ${formatBytes(burst)}`,
    `; ${g.waits} wait${g.waits === 1 ? '' : 's'} so far (${g.waitsGranted} granted, ${(g.waitMsTotal / 1000).toFixed(1)} s in all)`,
  ].join('');
  const cell = (s: string, right = true) => `<td${right ? ' class="n"' : ''}>${esc(s)}</td>`;
  const rows = g.members.map((m) =>
    [
      `<tr${m.self ? ' class="self"' : ''}>`,
      cell(`${m.pid}${m.self ? ' (this allocator)' : ''}`, false),
      cell(m.requestBytes ? formatBytes(m.requestBytes) : 'none'),
      cell(m.memberLimitBytes ? formatBytes(m.memberLimitBytes) : 'the budget'),
      cell(formatBytes(m.poolBytes)),
      cell(formatBytes(m.bytesInUse)),
      cell(waitText(m.waitingBytes, m.waitingSince, g.at)),
      '</tr>',
    ].join(''),
  );
  return [
    `<h2>Group ${esc(g.name)}, when the trace was taken</h2>`,
    `<p>${esc(summary)}</p>`,
    '<table class="group"><thead><tr><th>member (pid)</th><th>request</th><th>own limit</th><th>charged</th><th>in use</th><th>waiting</th></tr></thead>',
    `<tbody>${rows.join('\n')}</tbody></table>`,
  ].join('\n');
}
