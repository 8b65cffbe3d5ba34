/** `cuda-memory doctor`: checks for a GPU CI runner, one GPU or with --devices the whole host. */
import { Command, Option } from 'commander';
import { status, devices } from '../device/discovery';
import { runDoctor, runDoctorDevices } from '../bench/doctor';
import { readExpectations } from '../bench/expectations';
import { formatDoctor, doctorJunit, formatDoctorDevices, doctorDevicesJunit } from '../report/doctor';
import { writeTextfile } from '../metrics/exposition';
import { doctorFamilies } from '../metrics/families';
import { parseSize } from '../base/units';
import { Usage, requireGpu, writeOutput } from './common';
import { deviceList, integer, outFile, rate, wrap } from './options';

// What commander hands the action.
interface DoctorCliOptions {
  device?: number;
  devices?: 'all' | number[];
  minP2p?: number;
  minPinned?: number;
  minD2d?: number;
  bytes?: number;
  json?: boolean;
  junit?: string;
  prometheus?: string;
  expectations?: string;
}

export function register(program: Command): void {
  program
    .command('doctor')
    .description('checks for a GPU CI runner: device, PCIe link, pinned and device-to-device rates')
    .option('--min-pinned <GB/s>', 'lowest pinned rate that passes (default 20)', rate)
    .option('--min-d2d <GB/s>', 'lowest device-to-device read+write rate that passes (default 500)', rate)
    .addOption(new Option('--device <n>', 'device index').argParser(integer(0)))
    .option('--devices <list>', "several GPUs: 'all' or 0,1 — each GPU's checks, then peer access and rate for each pair", deviceList)
    .option(
      '--min-p2p <GB/s>',
      'with --devices: lowest copy rate between two GPUs (default on NVLink pairs: half the rate of its links at the generation NVML reports)',
      rate,
    )
    .option('--bytes <size>', 'copy size of the rate checks', wrap(parseSize))
    .option(
      '--expectations <file>',
      "the expectation file the rate checks are held to (default: the package's file for this GPU and link, if any; 'none' for the built-in floors)",
      wrap(expectationsOption),
    )
    .option('--json', 'the JSON report on stdout')
    .option('--junit <file>', 'JUnit XML, one testcase per check', outFile)
    .option('--prometheus <file>', "the checks in node_exporter's textfile format (name it *.prom)", outFile)
    .action((o: DoctorCliOptions) => {
      process.exitCode = o.devices !== undefined || o.minP2p !== undefined ? doctorDevices(o) : doctor(o);
    });
}

function doctor(o: DoctorCliOptions): number {
  const report = runDoctor({
    device: o.device,
    minPinnedGbps: o.minPinned,
    minD2dGbps: o.minD2d,
    bytes: o.bytes,
    expectations: expectationsArg(o.expectations),
  });
  if (o.junit) writeOutput(o.junit, doctorJunit(report));
  if (o.prometheus) {
    const uuid = status().available ? devices().find((d) => d.index === report.device)?.uuid : undefined;
    writeOutput(o.prometheus, (f) => writeTextfile(f, doctorFamilies(report, uuid)));
  }
  if (o.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  else if (status().available) process.stdout.write(formatDoctor(report) + '\n');
  else requireGpu('doctor'); // one line saying why, exit 2 (the files above record the failure)
  return doctorExit(report.ok);
}

// 0 ok, 1 a failed check, 2 no CUDA (with --json too, where no line says why).
function doctorExit(ok: boolean): number {
  if (!status().available) return 2;
  return ok ? 0 : 1;
}

function doctorDevices(o: DoctorCliOptions): number {
  if (o.device !== undefined) throw new Usage('--device picks one GPU; with several use --devices');
  if (o.prometheus) throw new Usage('--prometheus is written for one GPU only; leave out --devices');
  const report = runDoctorDevices({
    devices: o.devices,
    minPinnedGbps: o.minPinned,
    minD2dGbps: o.minD2d,
    minP2pGbps: o.minP2p,
    bytes: o.bytes,
    expectations: expectationsArg(o.expectations),
  });
  if (o.junit) writeOutput(o.junit, doctorDevicesJunit(report));
  if (o.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  else if (status().available) process.stdout.write(formatDoctorDevices(report) + '\n');
  else requireGpu('doctor');
  return doctorExit(report.ok);
}

// --expectations: a file, read (and checked) before anything runs, or 'none'.
function expectationsOption(value: string): string {
  if (value !== 'none') readExpectations(value);
  return value;
}

function expectationsArg(value: string | undefined): string | null | undefined {
  return value === 'none' ? null : value;
}
