/** Allocator options from the environment, TensorFlow's variables included. */
import type { AllocatorOptions } from './options';
import { parseSize } from '../base/units';
import { isAllocatorBackend, supports } from './backend';
import { invalidArgument } from '../base/errors';
import { checkOptions } from '../base/validate';

/**
 * What {@link allocatorOptionsFromEnv} found, with anything it ignored and why.
 *
 * @category Allocators
 */
export interface EnvAllocatorOptions extends AllocatorOptions {
  /** Messages about variables that were present but ignored. */
  warnings: string[];
}

/**
 * Reads CUDA_MEMORY_ALLOW_GROWTH, CUDA_MEMORY_FRACTION, CUDA_MEMORY_LIMIT (bytes or "8GiB") and
 * CUDA_MEMORY_BACKEND (bfc or async), then TensorFlow's variables as TensorFlow reads them:
 * TF_FORCE_GPU_ALLOW_GROWTH, where only "true" or "false" override allowGrowth (any other value is
 * reported and ignored), and TF_GPU_ALLOCATOR, where exactly "cuda_malloc_async" selects the
 * stream-ordered backend; and PyTorch's PYTORCH_CUDA_ALLOC_CONF, where `expandable_segments:True`
 * turns on expandableSegments and `backend:cudaMallocAsync` selects the stream-ordered backend
 * (other keys are reported in `warnings` and ignored).
 *
 * @category Allocators
 */
export function allocatorOptionsFromEnv(env: Record<string, string | undefined> = process.env): EnvAllocatorOptions {
  const read = envReader(env);
  const out: EnvAllocatorOptions = { warnings: [] };
  // Read in this order: a later variable overrides what an earlier one set.
  readAllowGrowth(read('CUDA_MEMORY_ALLOW_GROWTH'), out);
  readFraction(read('CUDA_MEMORY_FRACTION'), out);
  readLimit(read('CUDA_MEMORY_LIMIT'), out);
  if (out.memoryFraction !== undefined && out.memoryLimit !== undefined) {
    out.warnings.push('CUDA_MEMORY_FRACTION and CUDA_MEMORY_LIMIT were both set; CUDA_MEMORY_LIMIT was ignored');
    delete out.memoryLimit;
  }
  readTfAllowGrowth(read('TF_FORCE_GPU_ALLOW_GROWTH'), out);
  readBackend(read('CUDA_MEMORY_BACKEND'), out);
  readTfAllocator(read('TF_GPU_ALLOCATOR'), out);
  readTorchAllocConf(read('PYTORCH_CUDA_ALLOC_CONF'), out);
  return out;
}

// Checks env, and reads each variable as a string (process.env holds nothing else), or undefined.
function envReader(env: Record<string, string | undefined>): (key: string) => string | undefined {
  if (env === null) throw invalidArgument('env', 'an object of variables', env);
  checkOptions<Record<string, string | undefined>>('env', env);
  return (key) => {
    const v = env[key];
    if (v !== undefined && typeof v !== 'string') throw invalidArgument(`env.${key}`, 'a string', v);
    return v;
  };
}

// Set and not empty.
function isSet(value: string | undefined): value is string {
  return value !== undefined && value !== '';
}

function readAllowGrowth(growth: string | undefined, out: EnvAllocatorOptions): void {
  if (!isSet(growth)) return;
  const v = growth.toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) out.allowGrowth = true;
  else if (['0', 'false', 'no', 'off'].includes(v)) out.allowGrowth = false;
  else out.warnings.push(`CUDA_MEMORY_ALLOW_GROWTH=${JSON.stringify(growth)} is not a boolean (true/false/1/0) and was ignored`);
}

function readFraction(fraction: string | undefined, out: EnvAllocatorOptions): void {
  if (!isSet(fraction)) return;
  const f = Number(fraction);
  if (f > 0 && f <= 1) out.memoryFraction = f;
  else out.warnings.push(`CUDA_MEMORY_FRACTION=${JSON.stringify(fraction)} is not a number in (0, 1] and was ignored`);
}

function readLimit(limit: string | undefined, out: EnvAllocatorOptions): void {
  if (!isSet(limit)) return;
  try {
    out.memoryLimit = parseSize(limit);
  } catch {
    out.warnings.push(`CUDA_MEMORY_LIMIT=${JSON.stringify(limit)} is not a size (e.g. 8589934592 or 8GiB) and was ignored`);
  }
}

// tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc, GetAllowGrowthValue: exactly
// "true" or "false" (case-insensitive) override the option; anything else is logged and ignored.
function readTfAllowGrowth(tf: string | undefined, out: EnvAllocatorOptions): void {
  if (tf === undefined) return;
  const v = tf.toLowerCase();
  if (v === 'true') out.allowGrowth = true;
  else if (v === 'false') out.allowGrowth = false;
  else out.warnings.push(`TF_FORCE_GPU_ALLOW_GROWTH=${JSON.stringify(tf)} is neither "true" nor "false" and was ignored`);
}

function readBackend(backend: string | undefined, out: EnvAllocatorOptions): void {
  if (!isSet(backend)) return;
  if (isAllocatorBackend(backend)) out.backend = backend;
  else out.warnings.push(`CUDA_MEMORY_BACKEND=${JSON.stringify(backend)} is neither "bfc" nor "async" and was ignored`);
}

// tensorflow/core/common_runtime/gpu/gpu_process_state.cc: TF_GPU_ALLOCATOR is compared exactly
// (strcmp): "cuda_malloc_async" selects GpuCudaMallocAsyncAllocator, "cuda_malloc" and
// "memory_guard" two debugging allocators, and anything else leaves the BFC allocator.
function readTfAllocator(tfAllocator: string | undefined, out: EnvAllocatorOptions): void {
  if (!isSet(tfAllocator)) return;
  if (tfAllocator === 'cuda_malloc_async') out.backend = 'async';
  else if (tfAllocator === 'cuda_malloc' || tfAllocator === 'memory_guard')
    out.warnings.push(
      `TF_GPU_ALLOCATOR=${JSON.stringify(tfAllocator)} selects a TensorFlow debugging allocator, which cuda-memory does not have; ignored`,
    );
  else
    out.warnings.push(
      `TF_GPU_ALLOCATOR=${JSON.stringify(tfAllocator)} is not "cuda_malloc_async"; as in TensorFlow, the BFC allocator is kept`,
    );
}

// PyTorch's PYTORCH_CUDA_ALLOC_CONF (c10/cuda/CUDAAllocatorConfig): comma-separated key:value
// pairs. expandable_segments:True|False and backend:native|cudaMallocAsync have equivalents
// here; the other keys tune PyTorch's own caching allocator and are reported as ignored.
// TensorFlow has no variable for its virtual-memory sub-allocator.
function readTorchAllocConf(torch: string | undefined, out: EnvAllocatorOptions): void {
  if (!isSet(torch)) return;
  for (const raw of torch.split(',')) {
    const pair = raw.trim();
    if (pair) readTorchPair(pair, out);
  }
  if (out.expandableSegments && out.backend !== undefined && !supports(out.backend, 'expandableSegments')) {
    out.warnings.push(
      'PYTORCH_CUDA_ALLOC_CONF asks for expandable_segments with backend:cudaMallocAsync; expandable segments need the bfc backend and were left off',
    );
    delete out.expandableSegments;
  }
}

// One key:value pair of PYTORCH_CUDA_ALLOC_CONF.
function readTorchPair(pair: string, out: EnvAllocatorOptions): void {
  const [key, value] = pair.split(':', 2).map((x) => x.trim());
  if (key === 'expandable_segments' && (value === 'True' || value === 'False')) out.expandableSegments = value === 'True';
  else if (key === 'backend' && value === 'cudaMallocAsync') out.backend = 'async';
  else if (key === 'backend' && value === 'native') out.backend = 'bfc';
  else if (key === 'expandable_segments' || key === 'backend')
    out.warnings.push(
      `PYTORCH_CUDA_ALLOC_CONF ${JSON.stringify(pair)}: PyTorch accepts ${key === 'backend' ? 'native or cudaMallocAsync' : 'True or False'} there; ignored`,
    );
  else
    out.warnings.push(`PYTORCH_CUDA_ALLOC_CONF ${JSON.stringify(pair)} tunes PyTorch's own allocator and has no equivalent here; ignored`);
}
