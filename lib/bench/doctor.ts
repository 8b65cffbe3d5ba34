/**
 * `cuda-memory doctor`: a short, standard check of a GPU CI runner. Each check passes, fails or
 * is skipped with a reason; the report is printable, JSON or JUnit.
 */
import { status, devices, formatCudaVersion, knownDeviceCount } from '../discovery';
import { DeviceBuffer, PinnedBuffer } from '../memory';
import { copy, memset } from '../copy';
import { native } from '../native';
import { rateSummary } from './stats';
import { renderJunit } from './report';
import { checkDevice } from '../validate';

/** Options of {@link runDoctor}. */
export interface DoctorOptions {
  device?: number;
  /** Least pinned host-to-device and device-to-host GB/s (default 20). */
  minPinnedGbps?: number;
  /** Least device-to-device copy GB/s, counting reads and writes (default 500). */
  minD2dGbps?: number;
  /** Bytes per timed copy (default 256 MiB). */
  bytes?: number;
}

/** One check. */
export interface DoctorCheck {
  name: string;
  status: 'pass' | 'fail' | 'skip';
  detail: string;
  value?: number;
  seconds: number;
}

/** The doctor's report. */
export interface DoctorReport {
  schema: 'cuda-memory/doctor@1';
  ok: boolean;
  device: number;
  checks: DoctorCheck[];
}

function timed(name: string, fn: () => Omit<DoctorCheck, 'name' | 'seconds'>): DoctorCheck {
  const t0 = process.hrtime.bigint();
  let r: Omit<DoctorCheck, 'name' | 'seconds'>;
  try {
    r = fn();
  } catch (e) {
    r = { status: 'fail', detail: (e as Error).message };
  }
  return { name, ...r, seconds: Number(process.hrtime.bigint() - t0) / 1e9 };
}

/** Runs the checks; never throws for a failed check (the report says), only for bad options. */
export function runDoctor(options: DoctorOptions = {}): DoctorReport {
  const minPinned = options.minPinnedGbps ?? 20;
  const minD2d = options.minD2dGbps ?? 500;
  const bytes = options.bytes ?? 256 * 2 ** 20;
  const st = status();
  const checks: DoctorCheck[] = [];
  const device = checkDevice(options.device, knownDeviceCount());
  checks.push(
    timed('device visible', () => {
      if (!st.available) return { status: 'fail', detail: `${st.reason}: ${st.message}` };
      const d = devices()[device];
      return {
        status: 'pass',
        detail: `${d.name} (${d.pciBusId}), ${(d.totalMemory / 2 ** 30).toFixed(1)} GiB, compute capability ${d.computeCapability}, driver CUDA ${formatCudaVersion(st.driverVersion)}`,
      };
    }),
  );
  if (!st.available) return { schema: 'cuda-memory/doctor@1', ok: false, device, checks };
  checks.push(
    timed('PCIe link at its maximum', () => {
      const link = devices()[device].pcie;
      if (!link) return { status: 'skip', detail: 'NVML is not available, so the link cannot be read' };
      const ok = link.currentGeneration >= link.maxGeneration && link.currentWidth >= link.maxWidth;
      return {
        status: ok ? 'pass' : 'fail',
        detail: `Gen${link.currentGeneration} x${link.currentWidth} of max Gen${link.maxGeneration} x${link.maxWidth}${ok ? '' : ' (an idle GPU may train down its link; under load it should reach the maximum)'}`,
      };
    }),
  );
  checks.push(
    timed('device allocation works', () => {
      const d = DeviceBuffer.alloc(bytes, { device });
      const p = PinnedBuffer.alloc(4096, { device });
      try {
        memset(d, 0xa5);
        copy(p, d, { srcOffset: bytes - 4096, byteLength: 4096 });
        const ok = p.bytes.every((b) => b === 0xa5);
        return {
          status: ok ? 'pass' : 'fail',
          detail: ok ? `allocated, set and read back ${(bytes / 2 ** 20).toFixed(0)} MiB` : 'memset data did not read back',
        };
      } finally {
        d.free();
        p.free();
      }
    }),
  );
  const pinned: Record<string, number> = {};
  for (const dir of ['h2d', 'd2h'] as const) {
    checks.push(
      timed(`pinned ${dir} >= ${minPinned} GB/s`, () => {
        const d = DeviceBuffer.alloc(bytes, { device });
        const p = PinnedBuffer.alloc(bytes, { device });
        try {
          p.bytes.fill(3);
          const s =
            dir === 'h2d' ? native.timeCopy(d._h, p._h, bytes, 2, 10, 'events') : native.timeCopy(p._h, d._h, bytes, 2, 10, 'events');
          const g = rateSummary(s, bytes).median;
          pinned[dir] = g;
          return {
            status: g >= minPinned ? 'pass' : 'fail',
            detail: `${g.toFixed(2)} GB/s median of 10 at ${(bytes / 2 ** 20).toFixed(0)} MiB`,
            value: g,
          };
        } finally {
          d.free();
          p.free();
        }
      }),
    );
  }
  checks.push(
    timed(`d2d >= ${minD2d} GB/s read+write`, () => {
      const a = DeviceBuffer.alloc(bytes, { device });
      const b = DeviceBuffer.alloc(bytes, { device });
      try {
        const s = native.timeCopy(b._h, a._h, bytes, 2, 10, 'events');
        const g = rateSummary(s, 2 * bytes).median;
        return { status: g >= minD2d ? 'pass' : 'fail', detail: `${g.toFixed(1)} GB/s read+write median of 10`, value: g };
      } finally {
        a.free();
        b.free();
      }
    }),
  );
  return { schema: 'cuda-memory/doctor@1', ok: checks.every((c) => c.status !== 'fail'), device, checks };
}

/** One line per check. */
export function formatDoctor(r: DoctorReport): string {
  const lines = r.checks.map((c) => `${c.status.toUpperCase().padEnd(4)} ${c.name}: ${c.detail}`);
  lines.push(r.ok ? 'doctor: all checks passed' : `doctor: ${r.checks.filter((c) => c.status === 'fail').length} check(s) failed`);
  return lines.join('\n');
}

/** The doctor's report as JUnit XML. */
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
  );
}
