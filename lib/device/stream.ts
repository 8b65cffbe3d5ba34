/** CUDA streams and events, disposable like buffers. */
import { inspectCustom, inspectSummary } from '../base/inspect';
import type { InspectOptionsLike, InspectLike } from '../base/inspect';
import { native } from '../binding/native';
import type { EventHandle, StreamHandle } from '../binding/types';
import { checkBoolean, checkDevice, checkOptions, isInstance } from '../base/validate';
import { knownDeviceCount } from './discovery';
import { invalidArgument, argTypeError, CudaMemoryError } from '../base/errors';
import { guardReceivers } from '../base/internal';

function disposedError(what: string): Error {
  return new CudaMemoryError(`the ${what} was disposed`, 'ERR_DISPOSED');
}

/**
 * @internal The native handle of an `options.stream` (undefined when none is given), checked to
 * be a live Stream; the copy, free and alloc options all read it so.
 */
export function streamOption(stream: unknown): StreamHandle | undefined {
  if (stream === undefined) return undefined;
  if (!isInstance(stream, Stream)) throw invalidArgument('options.stream', 'a Stream', stream);
  return (stream as Stream).handle();
}

/**
 * A CUDA stream: an ordered queue of work on one device.
 *
 * @category Devices and streams
 */
export class Stream {
  /** @internal */ _s: StreamHandle;
  readonly device: number;
  private _disposed = false;

  /** Creates a stream (cudaStreamCreateWithFlags). `nonBlocking` streams do not wait for the legacy default stream. */
  constructor(options?: { device?: number; nonBlocking?: boolean }) {
    const o = checkOptions<{ device: number; nonBlocking: boolean }>('options', options);
    this.device = checkDevice(o.device, knownDeviceCount());
    this._s = native.streamCreate(this.device, checkBoolean('options.nonBlocking', o.nonBlocking, true));
  }

  /** @internal */ handle(): StreamHandle {
    if (this._disposed) throw disposedError('stream');
    return this._s;
  }

  /** Blocks until everything queued on the stream has finished. */
  synchronize(): void {
    native.streamSynchronize(this.handle());
  }

  /** True when everything queued has finished (cudaStreamQuery). */
  query(): boolean {
    return native.streamQuery(this.handle());
  }

  /** True once disposed; every use then throws. */
  get disposed(): boolean {
    return this._disposed;
  }

  /** Waits for queued work, then destroys the stream. Idempotent. */
  dispose(): void {
    if (this._disposed) return;
    this._disposed = true;
    native.streamDestroy(this._s);
  }

  /** Disposes (as {@link Stream.dispose}), for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
  /** A summary for logs and JSON: kind, device and state. */
  toJSON(): { kind: 'stream'; device: number; state: 'live' | 'disposed' } {
    return { kind: 'stream', device: this.device, state: this._disposed ? 'disposed' : 'live' };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('Stream', this.toJSON(), depth, options, insp);
  }
}
guardReceivers(Stream, 'Stream');

/**
 * A CUDA event: a marker in a stream, for waiting and timing.
 *
 * @category Devices and streams
 */
export class Event {
  /** @internal */ _e: EventHandle;
  readonly device: number;
  private _disposed = false;

  /** Creates an event; `timing` (default true) allows elapsedTime(). */
  constructor(options?: { device?: number; timing?: boolean }) {
    const o = checkOptions<{ device: number; timing: boolean }>('options', options);
    this.device = checkDevice(o.device, knownDeviceCount());
    this._e = native.eventCreate(this.device, checkBoolean('options.timing', o.timing, true));
  }

  private handle(): EventHandle {
    if (this._disposed) throw disposedError('event');
    return this._e;
  }

  /** Records the event in `stream` (default: the legacy default stream). */
  record(stream?: Stream): this {
    if (stream !== undefined && !isInstance(stream, Stream)) throw argTypeError('Expected a Stream for stream');
    native.eventRecord(this.handle(), stream ? stream.handle() : undefined);
    return this;
  }

  /** Blocks until the work before the event has finished. */
  synchronize(): void {
    native.eventSynchronize(this.handle());
  }

  /** True when the work before the event has finished. */
  query(): boolean {
    return native.eventQuery(this.handle());
  }

  /** Milliseconds between two recorded events (cudaEventElapsedTime). */
  static elapsedTime(start: Event, end: Event): number {
    if (!isInstance(start, Event) || !isInstance(end, Event)) throw argTypeError('Expected two Events for start and end');
    return native.eventElapsed(start.handle(), end.handle());
  }

  /** True once disposed; every use then throws. */
  get disposed(): boolean {
    return this._disposed;
  }

  /** Destroys the event (cudaEventDestroy). Idempotent. */
  dispose(): void {
    if (this._disposed) return;
    this._disposed = true;
    native.eventDestroy(this._e);
  }

  /** Disposes (as {@link Event.dispose}), for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
  /** A summary for logs and JSON: kind, device and state. */
  toJSON(): { kind: 'event'; device: number; state: 'live' | 'disposed' } {
    return { kind: 'event', device: this.device, state: this._disposed ? 'disposed' : 'live' };
  }

  /** @internal */ [inspectCustom](depth: number, options: InspectOptionsLike, insp: InspectLike): string {
    return inspectSummary('Event', this.toJSON(), depth, options, insp);
  }
}
guardReceivers(Event, 'Event');
