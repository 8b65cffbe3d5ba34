#include "binding/instance.h"

#include "device/discovery.h"
#include "device/peers.h"
#include "transfer/staging.h"

namespace cm {

Instance::Instance() = default;
Instance::~Instance() { ReleasePeerStaging(*this); }

Instance& GetInstance(Napi::Env env) { return *env.GetInstanceData<Instance>(); }

const CudaStatus& GetStatus(Napi::Env env) {
  Instance& inst = GetInstance(env);
  if (!inst.status) inst.status = std::make_unique<CudaStatus>(ComputeStatus());
  return *inst.status;
}

void RequireCuda(Napi::Env env) {
  const CudaStatus& st = GetStatus(env);
  if (!st.available) ThrowValue(env, MakeUnavailableError(env, st.reason, st.message));
}

void CheckDevice(Napi::Env env, int device) {
  RequireCuda(env);
  int count = GetStatus(env).device_count;
  if (device < 0 || device >= count)
    ThrowRange(env, "device must be an integer from 0 to " + std::to_string(count - 1) +
                        " (this machine has " + std::to_string(count) + " CUDA device" +
                        (count == 1 ? "" : "s") + "), got " + std::to_string(device));
}

}  // namespace cm
