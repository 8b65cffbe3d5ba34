/**
 * The state a run's figures depend on, read when a check runs: versions (NVIDIA driver, CUDA
 * driver and runtime, this library), the clocks and the processes on the GPU (NVML), the PCIe
 * link and the GPU's NUMA node. Every record the doctor and the benchmark write carries it, and
 * the fault causes (faults.ts) are named from it.
 */
import { deviceLocality, formatCudaVersion, status } from '../device/discovery';
import { native, packageVersion } from '../binding/native';
import { ClockState, clockState } from './faults';

/**
 * Versions and clocks when a record was made.
 *
 * @category Benchmarks
 */
export interface RunState {
  /** The NVIDIA driver's version (NVML), e.g. `550.54.15`; null without NVML. */
  nvidiaDriverVersion: string | null;
  /** The CUDA version the driver supports, and the runtime's, e.g. `12.4`. */
  cudaDriverVersion: string;
  runtimeVersion: string;
  /** This library's version. */
  library: string;
  clocks: ClockState | null;
  /** NVML's processes on the GPU (this one included, where NVML lists it); null without NVML. */
  processes: { pid: number; usedBytes: number | null }[] | null;
  /** The GPU's NUMA node (sysfs); -1 unknown. */
  gpuNumaNode: number;
}

/**
 * The run state of a device now (versions alone when CUDA or NVML cannot say more).
 *
 * @category Benchmarks
 */
export function runState(device: number): RunState {
  const st = status();
  const bus = st.available ? (native.devices()[device] as { pciBusId?: string } | undefined)?.pciBusId : undefined;
  const nvml = bus ? native.nvmlState(bus) : null;
  return {
    nvidiaDriverVersion: nvml?.driverVersion ?? null,
    cudaDriverVersion: formatCudaVersion(st.driverVersion),
    runtimeVersion: formatCudaVersion(st.runtimeVersion),
    library: packageVersion(),
    clocks: clockState(nvml),
    processes: nvml?.processes ?? null,
    gpuNumaNode: bus ? (deviceLocality(bus)?.numaNode ?? -1) : -1,
  };
}
