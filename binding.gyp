{
  # Exception policy: C++ exceptions on (NAPI_CPP_EXCEPTIONS). Every callback may throw a
  # Napi::Error, which node-addon-api turns into a JS exception; with
  # NODE_ADDON_API_CPP_EXCEPTIONS_ALL any other std::exception is converted too, never a crash.
  "variables": {
    "cuda_home%": "<!(node scripts/find-cuda.js)",
    "cuda_lib%": "<!(node scripts/find-cuda.js --lib)"
  },
  "targets": [
    {
      "target_name": "cuda_memory",
      "sources": [
        "native/addon.cc",
        "native/common.cc",
        "native/discovery.cc",
        "native/memory.cc",
        "native/copy.cc",
        "native/staging.cc",
        "native/streams.cc",
        "native/allocator.cc",
        "native/bench.cc",
        "native/core/pool.cc",
        "native/core/policy.cc",
        "native/core/upstream.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native"],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_CPP_EXCEPTIONS",
        "NODE_ADDON_API_CPP_EXCEPTIONS_ALL",
        "NODE_ADDON_API_DISABLE_DEPRECATED"
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "conditions": [
        [
          "cuda_home==''",
          { "defines": ["CUDA_MEMORY_NO_CUDA"] },
          {
            "include_dirs": ["<(cuda_home)/include"],
            "libraries": ["<(cuda_lib)/libcudart_static.a", "-ldl", "-lpthread", "-lrt"]
          }
        ]
      ]
    }
  ]
}
