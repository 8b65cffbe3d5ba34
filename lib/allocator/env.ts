/** Allocator options from the environment, TensorFlow's variables included. */
import type { AllocatorOptions } from './allocator';
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
  if (env === null) throw invalidArgument('env', 'an object of variables', env);
  checkOptions<Record<string, string | undefined>>('env', env);
  // Each variable as a string (process.env holds nothing else), or undefined.
  const read = (key: string): string | undefined => {
    const v = env[key];
    if (v !== undefined && typeof v !== 'string') throw invalidArgument(`env.${key}`, 'a string', v);
    return v;
  };
  const out: EnvAllocatorOptions = { warnings: [] };
  const growth = read('CUDA_MEMORY_ALLOW_GROWTH');
  if (growth !== undefined && growth !== '') {
    const v = growth.toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(v)) out.allowGrowth = true;
    else if (['0', 'false', 'no', 'off'].includes(v)) out.allowGrowth = false;
    else out.warnings.push(`CUDA_MEMORY_ALLOW_GROWTH=${JSON.stringify(growth)} is not a boolean (true/false/1/0) and was ignored`);
  }
  const fraction = read('CUDA_MEMORY_FRACTION');
  if (fraction !== undefined && fraction !== '') {
    const f = Number(fraction);
    if (f > 0 && f <= 1) out.memoryFraction = f;
    else out.warnings.push(`CUDA_MEMORY_FRACTION=${JSON.stringify(fraction)} is not a number in (0, 1] and was ignored`);
  }
  const limit = read('CUDA_MEMORY_LIMIT');
  if (limit !== undefined && limit !== '') {
    try {
      out.memoryLimit = parseSize(limit);
    } catch {
      out.warnings.push(`CUDA_MEMORY_LIMIT=${JSON.stringify(limit)} is not a size (e.g. 8589934592 or 8GiB) and was ignored`);
    }
  }
  if (out.memoryFraction !== undefined && out.memoryLimit !== undefined) {
    out.warnings.push('CUDA_MEMORY_FRACTION and CUDA_MEMORY_LIMIT were both set; CUDA_MEMORY_LIMIT was ignored');
    delete out.memoryLimit;
  }
  // tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc, GetAllowGrowthValue: exactly
  // "true" or "false" (case-insensitive) override the option; anything else is logged and ignored.
  const tf = read('TF_FORCE_GPU_ALLOW_GROWTH');
  if (tf !== undefined) {
    const v = tf.toLowerCase();
    if (v === 'true') out.allowGrowth = true;
    else if (v === 'false') out.allowGrowth = false;
    else out.warnings.push(`TF_FORCE_GPU_ALLOW_GROWTH=${JSON.stringify(tf)} is neither "true" nor "false" and was ignored`);
  }
  const backend = read('CUDA_MEMORY_BACKEND');
  if (backend !== undefined && backend !== '') {
    if (isAllocatorBackend(backend)) out.backend = backend;
    else out.warnings.push(`CUDA_MEMORY_BACKEND=${JSON.stringify(backend)} is neither "bfc" nor "async" and was ignored`);
  }
  // tensorflow/core/common_runtime/gpu/gpu_process_state.cc: TF_GPU_ALLOCATOR is compared exactly
  // (strcmp): "cuda_malloc_async" selects GpuCudaMallocAsyncAllocator, "cuda_malloc" and
  // "memory_guard" two debugging allocators, and anything else leaves the BFC allocator.
  const tfAllocator = read('TF_GPU_ALLOCATOR');
  if (tfAllocator !== undefined && tfAllocator !== '') {
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
  const torch = read('PYTORCH_CUDA_ALLOC_CONF');
  if (torch !== undefined && torch !== '') {
    for (const raw of torch.split(',')) {
      const pair = raw.trim();
      if (!pair) continue;
      const [key, value] = pair.split(':', 2).map((x) => x.trim());
      if (key === 'expandable_segments' && (value === 'True' || value === 'False')) out.expandableSegments = value === 'True';
      else if (key === 'backend' && value === 'cudaMallocAsync') out.backend = 'async';
      else if (key === 'backend' && value === 'native') out.backend = 'bfc';
      else if (key === 'expandable_segments' || key === 'backend')
        out.warnings.push(
          `PYTORCH_CUDA_ALLOC_CONF ${JSON.stringify(pair)}: PyTorch accepts ${key === 'backend' ? 'native or cudaMallocAsync' : 'True or False'} there; ignored`,
        );
      else
        out.warnings.push(
          `PYTORCH_CUDA_ALLOC_CONF ${JSON.stringify(pair)} tunes PyTorch's own allocator and has no equivalent here; ignored`,
        );
    }
    if (out.expandableSegments && out.backend !== undefined && !supports(out.backend, 'expandableSegments')) {
      out.warnings.push(
        'PYTORCH_CUDA_ALLOC_CONF asks for expandable_segments with backend:cudaMallocAsync; expandable segments need the bfc backend and were left off',
      );
      delete out.expandableSegments;
    }
  }
  return out;
}
