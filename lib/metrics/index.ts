/**
 * Metrics for the monitoring a fleet already runs: {@link registerMetrics} for prom-client (an
 * optional peer dependency, loaded only when called), {@link metricsText} for the text format
 * without any dependency, and the node_exporter textfile writer behind `--prometheus FILE`;
 * `require('cuda-memory/metrics')`.
 * @packageDocumentation
 * @module cuda-memory/metrics
 */
import '../base/disposable';
import {
  ALLOCATOR_METRICS,
  DEVICE_METRICS,
  PINNED_POOL_METRICS,
  allocatorSamples,
  deviceSamples,
  pinnedPoolSamples,
  sourceFamilies,
  platformFamilies,
  PLATFORM_METRICS,
  GROUP_METRICS,
  GROUP_METRIC_LABELS,
  groupFamilies,
} from './families';
import type { MetricsSources } from './families';
import type { MetricFamily } from './exposition';
import { formatExposition } from './exposition';
import { CudaMemoryError, argTypeError, invalidArgument } from '../base/errors';
import { checkOptions, isReadable } from '../base/validate';

export type { MetricsSources, Named } from './families';
export type { MetricFamily, MetricSample } from './exposition';
export { hpcJobMapping, writeHpcJobMapping } from './hpc-jobs';

/**
 * The part of a prom-client `Registry` this library uses.
 *
 * @category Metrics
 */
export interface PromRegistry {
  /** prom-client's Registry.registerMetric. */
  registerMetric(metric: unknown): void;
  /** prom-client's Registry.removeSingleMetric. */
  removeSingleMetric(name: string): void;
}

/**
 * Options of {@link registerMetrics}.
 *
 * @category Metrics
 */
export interface RegisterMetricsOptions extends MetricsSources {
  /** The prom-client module to build the metrics with; default: `require('prom-client')`. */
  promClient?: unknown;
}

interface PromMetric {
  reset(): void;
  set?(labels: Record<string, string>, value: number): void;
  inc?(labels: Record<string, string>, value: number): void;
}

type PromModule = {
  Gauge: new (config: object) => PromMetric;
  Counter: new (config: object) => PromMetric;
};

function loadPromClient(given: unknown): PromModule {
  if (given) return given as PromModule;
  try {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    return require('prom-client') as PromModule;
  } catch {
    throw new CudaMemoryError(
      'registerMetrics needs the prom-client package: npm install prom-client (or pass { promClient })',
      'ERR_MODULE_NOT_FOUND',
    );
  }
}

// dcgm-exporter's labels, which a series carries where the GPU's NVML index and uuid are known
// (families.ts dcgmLabels): every family on a GPU declares them.
const DCGM_LABELS = ['gpu', 'UUID'];

/**
 * Registers gauges and counters for allocators, pinned pools, devices and group budgets in a prom-client
 * registry. The figures are read at each scrape (`allocator.stats()`, `cudaMemGetInfo`), so
 * nothing runs between scrapes. Returns a function that removes them again.
 *
 * ```js
 * const client = require('prom-client');
 * const registry = new client.Registry();
 * cm.registerMetrics(registry, { allocators: { main: allocator }, devices: true });
 * // GET /metrics: res.end(await registry.metrics())
 * ```
 *
 * @category Metrics
 */
export function registerMetrics(registry: PromRegistry, options: RegisterMetricsOptions = {}): () => void {
  if (!registry || typeof registry !== 'object' || !isReadable(registry) || typeof registry.registerMetric !== 'function')
    throw argTypeError('Expected registry to be a prom-client Registry (with registerMetric) but received ' + typeof registry);
  options = checkOptions<RegisterMetricsOptions>('options', options);
  const prom = loadPromClient(options.promClient);
  const names: string[] = [];
  const add = <S>(
    defs: { name: string; help: string; type: 'gauge' | 'counter'; value: (s: S) => number }[],
    labelNames: string[],
    read: () => { labels: Record<string, string>; stats: S }[],
  ) => {
    for (const d of defs) {
      const Kind = d.type === 'counter' ? prom.Counter : prom.Gauge;
      new Kind({
        name: d.name,
        help: d.help,
        labelNames,
        registers: [registry],
        // prom-client calls collect() before each scrape; `this` is the metric.
        collect(this: PromMetric) {
          this.reset();
          for (const s of read()) {
            const v = d.value(s.stats);
            if (d.type === 'counter') this.inc!(s.labels, v);
            else this.set!(s.labels, v);
          }
        },
      });
      names.push(d.name);
    }
  };
  if (options.allocators) add(ALLOCATOR_METRICS, ['allocator', 'device', ...DCGM_LABELS], () => allocatorSamples(options.allocators));
  if (options.pinnedPools) add(PINNED_POOL_METRICS, ['pool'], () => pinnedPoolSamples(options.pinnedPools));
  if (options.devices) {
    add(DEVICE_METRICS, ['device', 'uuid', ...DCGM_LABELS], () => deviceSamples(options.devices));
    // The platform's families, read once per scrape and shared by the two gauges.
    const read = cachedFamilies(() => platformFamilies(options.devices));
    add([{ ...PLATFORM_METRICS[0], value: (v: number) => v }], ['device', 'uuid', 'kind', ...DCGM_LABELS], read(0));
    add([{ ...PLATFORM_METRICS[1], value: (v: number) => v }], ['device', 'uuid', ...DCGM_LABELS], read(1));
  }
  if (options.groups) {
    // Every ledger read once per scrape for all the group gauges.
    const read = cachedFamilies(() => groupFamilies(options.groups));
    GROUP_METRICS.forEach((d, i) => add([{ ...d, value: (v: number) => v }], [...GROUP_METRIC_LABELS[i], ...DCGM_LABELS], read(i)));
  }
  return () => {
    for (const n of names) registry.removeSingleMetric(n);
  };
}

// Families computed at most once per 500 ms (one scrape reads each of them in turn), and a
// reader of the samples of the i-th, as registerMetrics' `add` takes them.
function cachedFamilies(compute: () => MetricFamily[]): (i: number) => () => { labels: Record<string, string>; stats: number }[] {
  let cached: { at: number; families: MetricFamily[] } | null = null;
  return (i) => () => {
    if (!cached || Date.now() - cached.at > 500) cached = { at: Date.now(), families: compute() };
    return (cached.families[i]?.samples ?? []).map((s) => ({ labels: s.labels as Record<string, string>, stats: s.value }));
  };
}

/**
 * The same figures as {@link registerMetrics}, as Prometheus text, with no dependency.
 *
 * @category Metrics
 */
export function metricsText(sources: MetricsSources): string {
  if (sources === null || sources === undefined)
    throw invalidArgument('sources', 'an object { allocators?, pinnedPools?, devices? }', sources);
  checkOptions<MetricsSources>('sources', sources);
  return formatExposition(sourceFamilies(sources));
}
