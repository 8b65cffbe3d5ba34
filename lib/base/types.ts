/**
 * The data shapes the addon returns and the errors carry: staging settings and placement, the
 * peer matrix, a group's ledger, an IPC handle, a managed range's attributes. They sit at the
 * bottom so that every layer may name them; this file imports nothing.
 */

/**
 * Settings of the staged path.
 *
 * @category Devices and streams
 */
export interface StagingSettings {
  /** Size of each pinned chunk in the ring: the largest chunk. */
  chunkBytes: number;
  /** Size of the first chunk; later ones double up to chunkBytes (so a copy of a few MiB starts moving early). */
  firstChunkBytes: number;
  /**
   * Size of the last chunk; chunks halve down to it at the end (so little is left to do once the
   * last chunk has moved). Not used by copies to the device below 64 MiB, whose chunks only grow.
   */
  lastChunkBytes: number;
  /** Chunks in the ring. */
  slots: number;
  /**
   * Bytes of pinned memory in one ring (slots × chunkBytes, rounded down to 4 KiB): each GPU
   * holds one per direction it has staged copies in. Derived; not a setting.
   */
  readonly ringBytes: number;
  /**
   * Host threads copying between the Node buffer and the ring, counting the thread that asked for
   * the copy. At most as many as the CPUs the team shares run at once, fewer while other GPUs'
   * teams copy too ({@link StagingPlacement.sharedCpus}).
   */
  threads: number;
  /**
   * Non-temporal (cache-bypassing) stores into and out of the ring. `'auto'` (the default): on,
   * except into the ring for host-to-device copies from 64 MiB up, where ordinary stores measured
   * faster.
   */
  streaming: boolean | 'auto';
  /** Pageable copies from these sizes up take the staged path under strategy 'auto', per direction. */
  autoThreshold: { h2d: number; d2h: number };
}

/**
 * Where the staged path keeps its threads and pinned ring for one GPU (see {@link stagingPlacement}).
 *
 * @category Devices and streams
 */
export interface StagingPlacement {
  device: number;
  /** The GPU's NUMA node from sysfs; -1 when the host does not say (common in VMs). */
  numaNode: number;
  /** NUMA nodes the host has online (0 when they could not be read). */
  hostNodes: number;
  /** Placement is done: several nodes, and the GPU's is known. On one node it is a no-op. */
  applies: boolean;
  /** Why it applies or not, for people. */
  reason: string;
  /** The node's CPUs the copy threads are kept on (empty when placement does not apply). */
  cpus: number[];
  /** Threads of the copy team serving this GPU (counting the caller's). */
  threads: number;
  /** Every started team thread was restricted to `cpus`. */
  threadsPinned: boolean;
  /**
   * The CPUs this GPU's team shares with the teams of the other GPUs on them (the node's, or all
   * the process may use): while k of those GPUs copy at once, each team runs at most
   * max(2, sharedCpus / k) threads.
   */
  sharedCpus: number;
  /**
   * The pinned rings made so far (one per direction, on the first staged copy): the node their
   * pages are on (get_mempolicy; -1 unknown) and whether they were asked to go to the GPU's node.
   */
  rings: { direction: 'h2d' | 'd2h'; node: number; placed: boolean }[];
}

/**
 * What one ordered pair of devices can do (see {@link peerAccess}).
 *
 * @category Devices and streams
 */
export interface PeerLink {
  from: number;
  to: number;
  /** cudaDeviceCanAccessPeer: `from` can address `to`'s memory (NVLink or PCIe P2P). */
  canAccess: boolean;
  /** Peer access was enabled by this thread's addon instance (copies enable it lazily). */
  enabled: boolean;
  /** cudaDevP2PAttrPerformanceRank: relative link performance (lower is better). */
  performanceRank: number;
  /** cudaDevP2PAttrNativeAtomicSupported: atomics over the link (NVLink has them). */
  nativeAtomics: boolean;
  /**
   * How the pair is joined, from NVML: `nvlink` (directly or through NVSwitches), `pcie` (no
   * NVLink between them), `unknown` without NVML or a driver too old for its NVLink queries.
   */
  linkType: 'nvlink' | 'pcie' | 'unknown';
  /** Active NVLinks joining the pair (nvidia-smi topo's NV#); null when unknown. */
  nvlinks: number | null;
  /** The NVLinks go through NVSwitches (every GPU on the fabric reaches every other). */
  viaNvSwitch: boolean;
  /** The NVLink generation and its rate, for pairs joined by NVLink; null otherwise. */
  nvlinkRate: NvLinkRate | null;
}

/**
 * The generation of a pair's NVLinks and the rate of one link in one direction. NVML says the
 * generation (the oldest among the pair's links); where the GPU's architecture has one
 * generation only and NVML says another (some drivers report 5.0 on Hopper), the
 * architecture's is used, and `source` says so.
 *
 * @category Devices and streams
 */
export interface NvLinkRate {
  /** "1.0" to "5.0"; null when neither NVML nor the compute capability says. */
  generation: string | null;
  /** GB/s of one link in one direction: 20 for 1.0, 25 for 2.0 to 4.0, 50 for 5.0; 25 when assumed. */
  gbpsPerLink: number;
  /** Where the generation came from: "reported by NVML", "from compute capability 9.0 (NVML reported 5.0)", "25 GB/s assumed: …". */
  source: string;
}

/**
 * One process (one allocator) in a group.
 *
 * @category Devices and streams
 */
export interface GroupMember {
  pid: number;
  /** Bytes of regions it holds (charged to the group). */
  poolBytes: number;
  /** Bytes its live buffers use (published at each alloc and free). */
  bytesInUse: number;
  peakPoolBytes: number;
  /** Its own limit (memoryFraction, memoryLimit, or the group budget); 0 for a process the interposer charges, which has none. */
  limitBytes: number;
  /** When it joined (ms since the epoch). */
  joinedAt: number;
  /**
   * Its guaranteed request: bytes it can always have, reserved from the moment it joined (0:
   * none). Beyond it, a member takes only from the burst pool, the budget less every request.
   */
  requestBytes: number;
  /** The most it may hold, as it joined with (`shared.memberLimit`, `run --member-limit`); 0: the budget. */
  memberLimitBytes: number;
  /** The bytes of an allocation it waits room for (0: it does not wait). */
  waitingBytes: number;
  /** When that wait began (ms since the epoch), or null when it does not wait. */
  waitingSince: number | null;
  /** True for the allocator asking. */
  self: boolean;
  /**
   * Its command line (/proc/PID/cmdline, arguments joined by spaces, the first 4 KiB), or null
   * where it cannot be read. The process's own text: printed, its control characters are escaped.
   */
  command: string | null;
  /**
   * The device memory NVML reports the process using: its CUDA context and every allocation it
   * holds, by any API, whether the group charged it or not. Null on a simulated device, without
   * NVML, and where NVML does not list the pid (a process without a CUDA context yet, or a
   * member in another pid namespace: NVML lists the host's pids).
   */
  nvmlUsedBytes: number | null;
}

/**
 * A process that a group's budget does not hold, recorded beside the group's ledger by the
 * interposer (see docs/internals.md, "What is charged, and what fails open"): it could not join or
 * keep the group (a ledger missing, full, damaged, foreign or another user's, a setting that does
 * not parse, the ledger's lock not had in time), so its allocations go on uncharged or, where
 * `strict`, are refused; or it holds memory the interposer cannot see (a module in another
 * link-map namespace, graph memory the budget could not afford after a launch). Gone with the
 * process, however it ends.
 *
 * @category Processes
 */
export interface UnchargedProcess {
  pid: number;
  /** When it was recorded (ms since the epoch). */
  since: number;
  /** Why: the error code (ERR_GROUP_LEDGER_CORRUPT, ERR_PRELOAD_MODULE, ...). */
  code: string;
  /** What happened, as the process said it on its stderr. */
  detail: string;
  /** Under CUDA_MEMORY_GROUP_STRICT=1: its allocations are refused, not let through. */
  strict: boolean;
  /** What its allocations since asked for, uncharged (or refused, where strict). */
  unchargedBytes: number;
  /** How many allocations that was. */
  unchargedAllocations: number;
  /** Its command line, as GroupMember's. */
  command: string | null;
}

/**
 * A group's ledger as it is now.
 *
 * @category Devices and streams
 */
export interface GroupStats {
  name: string;
  /** The GPU's uuid, or "simulated". */
  device: string;
  path: string;
  budgetBytes: number;
  budgetSource: string;
  /** Sum of the members' pool bytes. */
  chargedBytes: number;
  /** budgetBytes − chargedBytes: room for new regions. */
  freeBytes: number;
  /** Slots of dead members this read cleared. */
  reapedMembers: number;
  /** The members' requests, summed: the part of the budget no other member may borrow. */
  reservedBytes: number;
  /** Waits for room since the group's ledger was made: how many began. */
  waits: number;
  /** How many of those waits ended with the room they waited for. */
  waitsGranted: number;
  /** How long those waits lasted in all, in milliseconds. */
  waitMsTotal: number;
  members: GroupMember[];
  /** The processes of the group that its budget does not hold (see {@link UnchargedProcess}). */
  uncharged: UnchargedProcess[];
  /**
   * The cluster scheduler's job the group is the budget of, where its name says so; else null.
   * As groupStats(), listGroups() and `top` read it (absent in an out-of-memory error's group).
   */
  job?: GroupJob | null;
}

/**
 * The scheduler's job of a group: `cuda-memory slurm task-prolog` names a Slurm job's group
 * `slurm-<job id>`, in the job user's own folder, so the job and its user are the group's name
 * and its ledger's owner.
 *
 * @category Processes
 */
export interface GroupJob {
  scheduler: 'slurm';
  /** The job id, as SLURM_JOB_ID. */
  id: string;
  /** The uid that owns the ledger (the job's user), and its name where the system knows it. */
  uid: number | null;
  user: string | null;
}

/**
 * Live resources of one kind on one device, as the addon counts them for leak checks: buffers
 * (`device`, `pinned`, `registered`, `managed`, `shared-pinned`, `ipc-import`,
 * `allocator-block`), raw allocations (`raw`), open allocators (`allocator`, bytes: their pool
 * bytes) and group members (`group`).
 *
 * @category Testing
 */
export interface LiveBufferRow {
  kind: string;
  device: number;
  simulated: boolean;
  count: number;
  bytes: number;
  /** Where each was made, where known (raw allocations). */
  where: string[];
  /**
   * The worker thread that holds them (its `threadId`), where another thread than the one that
   * asked does; absent for the asking thread's own.
   */
  thread?: number;
}

/**
 * What NVML says of a device at one moment; null where NVML does not answer.
 *
 * @category Devices and streams
 */
export interface NvmlDeviceState {
  /** The NVIDIA driver's version, e.g. `550.54.15`. */
  driverVersion: string | null;
  smClockMHz: number | null;
  smClockMaxMHz: number | null;
  memoryClockMHz: number | null;
  memoryClockMaxMHz: number | null;
  /** Why the clocks are held down: a bit mask of NVML's `nvmlClocksEventReason*` (0: not held). */
  clocksEventReasons: number | null;
  /** The processes with a CUDA context on the device and their memory (null: not readable here). */
  processes: { pid: number; usedBytes: number | null }[] | null;
}

/**
 * @internal The file error codes as the addon takes them at init (lib/base/files.ts's table, by
 * the errno values of this platform). Here rather than beside the table so that the binding's
 * types name it without reaching files.ts, whose declarations need Node's types.
 */
export interface FileCodeTable {
  /** [errno value, code] for each errno the table names and this platform has. */
  byErrno: [errno: number, code: string][];
  /** The code of any other errno. */
  otherwise: string;
}

/**
 * An exported device buffer, as a plain object of strings and numbers: it survives
 * `process.send`, `worker.postMessage`, and `JSON.stringify`/`JSON.parse` unchanged, and
 * importIpc() takes it as an object or as its JSON text.
 *
 * - `handle`: the 64 bytes of `cudaIpcMemHandle_t`, in hex, for the allocation holding the
 *   buffer (for a block of an allocator, the region it was carved from);
 * - `offset`, `byteLength`: where the buffer lies in that allocation;
 * - `device`: the GPU's uuid (the importer opens it on the device with that uuid);
 * - `record`, `token`, `pid`: the export's record in shared memory and its random token; the
 *   importer checks the handle against the record, so a forged or altered handle is refused
 *   before it reaches the driver, and the exporter counts its importers there.
 *
 * @category Processes
 */
export interface IpcHandle {
  type: 'cuda-memory/ipc@1';
  record: string;
  token: string;
  handle: string;
  device: string;
  offset: number;
  byteLength: number;
  pid: number;
}

/** Where managed memory can be: a device index, or the host's RAM. */
export type ManagedLocation = number | 'host';

/** What the driver holds for a range (cudaMemRangeGetAttribute). */
export interface ManagedAttributes {
  /** Every page of the range is advised read-mostly. */
  readMostly: boolean;
  /** The preferred location of every page of the range, or null (none, or not the same for all). */
  preferredLocation: ManagedLocation | null;
  /** Where the whole range was last prefetched, or null (never, or not all to one place). */
  lastPrefetchLocation: ManagedLocation | null;
  /** The locations advised to access the whole range. */
  accessedBy: ManagedLocation[];
}
