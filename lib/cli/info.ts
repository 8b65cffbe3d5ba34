/** `cuda-memory info`: devices, driver and runtime, the binary in use, and why CUDA is unavailable if it is. */
import { Command } from 'commander';
import { status, devices, formatCudaVersion, deviceLocality, cudaVisibleDevices, DeviceInfo } from '../device/discovery';
import { peerAccess, describeLink, PeerLink } from '../device/peers';
import { stagingPlacement, StagingPlacement } from '../transfer/staging';
import { formatBytes } from '../base/units';
import { platformInfo, formatPlatform, describePlatformLimit } from '../device/platform';
import type { PlatformInfo } from '../device/platform';
import { version } from './common';

export function register(program: Command): void {
  program
    .command('info')
    .description('devices, driver and runtime, the binary in use, and why CUDA is unavailable if it is')
    .option('--json', 'the same as JSON')
    .action((o: { json?: boolean }) => {
      process.exitCode = info(o);
    });
}

function placementOf(device: number): StagingPlacement | null {
  try {
    return stagingPlacement(device);
  } catch {
    return null;
  }
}

function info(o: { json?: boolean }): number {
  const st = status();
  const list = st.available ? devices() : [];
  const locality = list.map((d) => deviceLocality(d.pciBusId));
  const peers = list.length > 1 ? peerAccess() : [];
  const placement = list.map((d) => placementOf(d.index));
  let platform: PlatformInfo | null = null;
  let platformError = '';
  try {
    platform = platformInfo();
  } catch (e) {
    platformError = (e as Error).message;
  }
  if (o.json) {
    const out = {
      status: st,
      cudaVisibleDevices: cudaVisibleDevices(),
      devices: list.map((d, i) => ({ ...d, locality: locality[i], stagingPlacement: placement[i] })),
      peers,
      platform,
    };
    process.stdout.write(JSON.stringify(out, null, 2) + '\n');
    return st.available ? 0 : 2;
  }
  process.stdout.write(
    `cuda-memory ${version()}: ${st.available ? 'CUDA available' : `CUDA not available (${st.reason})`}: ${st.message}\n`,
  );
  process.stdout.write(
    `driver CUDA ${formatCudaVersion(st.driverVersion)}, runtime CUDA ${formatCudaVersion(st.runtimeVersion)}, built with CUDA: ${st.builtWithCuda}\n`,
  );
  process.stdout.write(`binary: ${st.binary.kind}${st.binary.path ? ` (${st.binary.path})` : ''}\n`);
  for (const line of platform ? formatPlatform(platform) : [`platform: could not be read: ${platformError}`])
    process.stdout.write(`${line}\n`);
  if (!st.available) return 2;
  if (cudaVisibleDevices() !== null)
    process.stdout.write(
      `CUDA_VISIBLE_DEVICES=${cudaVisibleDevices()}: CUDA numbers the ${list.length} visible GPU${list.length === 1 ? '' : 's'} from 0\n`,
    );
  for (const d of list) {
    process.stdout.write(deviceLines(d, locality[d.index], placement[d.index]));
    process.stdout.write(platformLines(d, platform));
  }
  if (peers.length) {
    process.stdout.write('peer access (from -> to: can access, link, rank, native atomics):\n');
    for (const p of peers) process.stdout.write(peerLine(p));
  }
  return 0;
}

function deviceLines(d: DeviceInfo, l: ReturnType<typeof deviceLocality>, pl: StagingPlacement | null): string {
  const link = d.pcie
    ? `PCIe Gen${d.pcie.currentGeneration} x${d.pcie.currentWidth} (max Gen${d.pcie.maxGeneration} x${d.pcie.maxWidth})`
    : 'PCIe link unknown';
  const nvml = d.nvmlIndex !== null && d.nvmlIndex !== d.index ? ` (nvidia-smi index ${d.nvmlIndex})` : '';
  const where = pl
    ? pl.applies
      ? `on ${pl.reason}, threads ${pl.threadsPinned ? 'pinned' : 'NOT pinned'}`
      : `none (${pl.reason})`
    : 'unknown';
  const team = pl ? `; copy team of ${pl.threads} threads on ${pl.sharedCpus} CPUs shared with the other GPUs' teams` : '';
  return (
    `device ${d.index}: ${d.name}, ${formatBytes(d.totalMemory)}, compute capability ${d.computeCapability}, ${d.multiProcessorCount} SMs, ${d.asyncEngineCount} copy engines, ${d.pciBusId}, ${link}, ${d.uuid}${nvml}\n` +
    `  memory: ${d.sharedMemory.summary}; addressing mode ${d.addressingMode ?? 'not reported (NVML from driver 580 on)'}\n` +
    `  NUMA node ${l && l.numaNode >= 0 ? l.numaNode : 'unknown'}${l && l.localCpus ? `, local CPUs ${l.localCpus}` : ''}; staging placement: ${where}${team}\n`
  );
}

// The MIG slice and the platform limit of a device, under its lines.
function platformLines(d: DeviceInfo, platform: PlatformInfo | null): string {
  let out = '';
  if (d.mig?.instance)
    out += `  MIG instance ${d.mig.uuid ?? '(uuid unknown)'}: ${formatBytes(d.totalMemory)}${d.mig.parentMemoryBytes !== null ? ` of the GPU's ${formatBytes(d.mig.parentMemoryBytes)}` : ''}\n`;
  else if (d.mig?.enabled) out += '  MIG mode on (this CUDA device is the whole GPU)\n';
  const limits = platform?.devices.find((x) => x.device === d.index);
  return out + `  platform limit: ${limits ? describePlatformLimit(limits) : 'unknown'}\n`;
}

function peerLine(p: PeerLink): string {
  const rateNote = p.nvlinkRate ? ` (${p.nvlinkRate.gbpsPerLink} GB/s per link each way, ${p.nvlinkRate.source})` : '';
  return `  ${p.from} -> ${p.to}: ${p.canAccess ? 'yes' : 'no'}, ${describeLink(p)}${rateNote}, rank ${p.performanceRank}, atomics ${p.nativeAtomics ? 'yes' : 'no'}\n`;
}
