// The CUDA runtime API, or, in a build without a CUDA toolkit, stand-ins that report no device
// (nocuda/cuda_runtime_api.h). Everything else includes this, never the toolkit header itself,
// so both builds compile the same code.
#pragma once

#ifdef CUDA_MEMORY_NO_CUDA
#include "nocuda/cuda_runtime_api.h"
#else
#include <cuda_runtime_api.h>
#endif
