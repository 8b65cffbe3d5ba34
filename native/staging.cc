#include "staging.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace cm {

namespace {

// memcpy, with non-temporal stores when `streaming`: staged data goes to the DMA engine or to a
// Node buffer the CPU is not about to read, so writing around the cache saves the
// read-for-ownership of every line and leaves the cache to the copy's source.
void CopyBytes(char* dst, const char* src, size_t n, bool streaming) {
#if defined(__x86_64__)
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (!streaming || head >= n || n < 4096) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t blocks = n / 64;
  for (size_t i = 0; i < blocks; ++i, src += 64, dst += 64) {
    const __m128i* s = reinterpret_cast<const __m128i*>(src);
    __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
            d = _mm_loadu_si128(s + 3);
    __m128i* o = reinterpret_cast<__m128i*>(dst);
    _mm_stream_si128(o, a);
    _mm_stream_si128(o + 1, b);
    _mm_stream_si128(o + 2, c);
    _mm_stream_si128(o + 3, d);
  }
  _mm_sfence();  // streaming stores are weakly ordered: finish them before the DMA starts
  std::memcpy(dst, src, n % 64);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace

ParallelCopier::ParallelCopier(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) workers_.emplace_back(&ParallelCopier::Worker, this, i);
}

ParallelCopier::~ParallelCopier() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ParallelCopier::CopyShare(int index, int parts) {
  // Shares are cut on 4 KiB boundaries so no two threads write one page.
  size_t pages = (n_ + 4095) / 4096;
  size_t begin = std::min(n_, pages * index / parts * 4096);
  size_t end = std::min(n_, pages * (index + 1) / parts * 4096);
  if (end > begin) CopyBytes(dst_ + begin, src_ + begin, end - begin, streaming_);
}

void ParallelCopier::Worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: the next chunk usually follows within microseconds, and a sleeping thread
    // takes tens of microseconds to wake.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen;
         ++spin) {
      std::this_thread::yield();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
    }
    CopyShare(index, threads_);
    remaining_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ParallelCopier::Copy(void* dst, const void* src, size_t n, bool streaming) {
  // Below ~256 KiB, waking threads costs more than it saves.
  if (threads_ == 1 || n < (256u << 10)) {
    CopyBytes(static_cast<char*>(dst), static_cast<const char*>(src), n, streaming);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dst_ = static_cast<char*>(dst);
    src_ = static_cast<const char*>(src);
    n_ = n;
    streaming_ = streaming;
    remaining_.store(threads_ - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  CopyShare(0, threads_);
  while (remaining_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

StagingOptions StagingOptionsInForce(const Instance& inst) {
  // The defaults were chosen with the transfer benchmark (BENCHMARKS.md); hardware threads
  // bound them. configureStaging() overrides each one.
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  StagingOptions o = {8u << 20, 4, static_cast<int>(std::clamp(hw * 3 / 4, 1u, 12u)), true};
  const Instance::StagingConfig& c = inst.staging_config;
  if (c.chunk_bytes) o.chunk_bytes = c.chunk_bytes;
  if (c.slots) o.slots = c.slots;
  if (c.threads) o.threads = c.threads;
  if (c.streaming >= 0) o.streaming = c.streaming == 1;
  return o;
}

StagingEngine::StagingEngine(int device, StagingOptions options)
    : device_(device), options_(options), copier_(options.threads) {
  CM_TRY(error_, cudaSetDevice(device), "cudaSetDevice");
  if (!error_)
    CM_TRY(error_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
           "cudaStreamCreateWithFlags");
  for (int i = 0; i < options_.slots && !error_; ++i) {
    void* p = nullptr;
    CM_TRY(error_, cudaHostAlloc(&p, options_.chunk_bytes, cudaHostAllocPortable),
           "cudaHostAlloc (staging ring)");
    if (error_) break;
    slots_.push_back(static_cast<char*>(p));
    cudaEvent_t ev = nullptr;
    CM_TRY(error_, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    if (!error_) done_.push_back(ev);
  }
}

StagingEngine::~StagingEngine() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t ev : done_) cudaEventDestroy(ev);
  for (char* p : slots_) cudaFreeHost(p);
  if (stream_) cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

Error StagingEngine::HostToDevice(void* dst_device, const void* src_host, size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  Error err;
  CM_TRY(err, cudaSetDevice(device_), "cudaSetDevice");
  const size_t chunk = options_.chunk_bytes;
  const size_t slots = slots_.size();
  char* dst = static_cast<char*>(dst_device);
  const char* src = static_cast<const char*>(src_host);
  for (size_t i = 0, off = 0; off < n && !err; ++i, off += chunk) {
    size_t s = i % slots, len = std::min(chunk, n - off);
    // The slot is reusable once the copy that last read it has finished.
    if (i >= slots) CM_TRY(err, cudaEventSynchronize(done_[s]), "cudaEventSynchronize");
    if (err) break;
    copier_.Copy(slots_[s], src + off, len, options_.streaming);
    CM_TRY(err, cudaMemcpyAsync(dst + off, slots_[s], len, cudaMemcpyHostToDevice, stream_),
           "cudaMemcpyAsync (staged host-to-device)");
    if (!err) CM_TRY(err, cudaEventRecord(done_[s], stream_), "cudaEventRecord");
  }
  Error sync;
  CM_TRY(sync, cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return err ? err : sync;
}

Error StagingEngine::DeviceToHost(void* dst_host, const void* src_device, size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  Error err;
  CM_TRY(err, cudaSetDevice(device_), "cudaSetDevice");
  const size_t chunk = options_.chunk_bytes;
  const size_t slots = slots_.size();
  const size_t chunks = (n + chunk - 1) / chunk;
  char* dst = static_cast<char*>(dst_host);
  const char* src = static_cast<const char*>(src_device);
  auto issue = [&](size_t i) {
    size_t off = i * chunk, len = std::min(chunk, n - off);
    CM_TRY(err, cudaMemcpyAsync(slots_[i % slots], src + off, len, cudaMemcpyDeviceToHost, stream_),
           "cudaMemcpyAsync (staged device-to-host)");
    if (!err) CM_TRY(err, cudaEventRecord(done_[i % slots], stream_), "cudaEventRecord");
  };
  // Keep every slot in flight; drain each into the Node buffer as soon as it lands.
  for (size_t i = 0; i < std::min(slots, chunks) && !err; ++i) issue(i);
  for (size_t i = 0; i < chunks && !err; ++i) {
    size_t s = i % slots, off = i * chunk, len = std::min(chunk, n - off);
    CM_TRY(err, cudaEventSynchronize(done_[s]), "cudaEventSynchronize");
    if (err) break;
    copier_.Copy(dst + off, slots_[s], len, options_.streaming);
    if (i + slots < chunks) issue(i + slots);
  }
  Error sync;
  CM_TRY(sync, cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return err ? err : sync;
}

StagingEngine* GetStagingEngine(Instance& inst, int device, bool to_host, Error* err) {
  std::lock_guard<std::mutex> lock(inst.staging_mutex);
  const int key = device * 2 + (to_host ? 1 : 0);
  auto it = inst.staging.find(key);
  if (it != inst.staging.end()) return it->second.get();
  auto engine = std::make_unique<StagingEngine>(device, StagingOptionsInForce(inst));
  if (engine->error()) {
    *err = engine->error();
    return nullptr;
  }
  StagingEngine* raw = engine.get();
  inst.staging[key] = std::move(engine);
  return raw;
}

}  // namespace cm
