{
  # Exception policy: C++ exceptions on (NAPI_CPP_EXCEPTIONS). A call from JavaScript may throw a
  # Napi::Error, which node-addon-api turns into a JS exception; with
  # NODE_ADDON_API_CPP_EXCEPTIONS_ALL any other std::exception is converted too, never a crash.
  # What runs while an environment is torn down (async completions, finalizers, the cleanup hook)
  # cannot throw into JavaScript, so nothing there throws: completions go through PromiseWorker
  # (native/binding/promise_worker.h), finalizers and the cleanup hook are noexcept and use the C Node-API calls,
  # whose failures they ignore. NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS is the backstop: an error
  # that can no longer be thrown into a dying environment is dropped rather than rethrown.
  "variables": {
    "cuda_home%": "<!(node scripts/find-cuda.js)",
    "cuda_lib%": "<!(node scripts/find-cuda.js --lib)",
    # The prebuilt binary (scripts/prebuild.js) links the C++ runtime in, so that it needs
    # nothing of the compiler it was built with, only glibc (>= 2.34; see native/base/glibc_compat.cc).
    "static_cxx%": "<!(node -p \"process.env.CUDA_MEMORY_STATIC_CXX ? 1 : 0\")"
  },
  "targets": [
    {
      "target_name": "cuda_memory",
      "sources": [
        "native/addon.cc",
        "native/binding/args.cc",
        "native/binding/errors.cc",
        "native/binding/handles.cc",
        "native/binding/instance.cc",
        "native/binding/promise_worker.cc",
        "native/device/discovery.cc",
        "native/device/nvml.cc",
        "native/device/peers.cc",
        "native/device/platform.cc",
        "native/device/shared_memory.cc",
        "native/device/stream.cc",
        "native/memory/buffers.cc",
        "native/memory/ipc.cc",
        "native/memory/ipc_foreign.cc",
        "native/memory/managed.cc",
        "native/memory/shared_pinned.cc",
        "native/memory/vmm.cc",
        "native/transfer/copy.cc",
        "native/transfer/pinned_memcpy.cc",
        "native/transfer/peer_copy.cc",
        "native/transfer/staging.cc",
        "native/transfer/files.cc",
        "native/transfer/files/failure.cc",
        "native/transfer/files/open.cc",
        "native/transfer/files/engine.cc",
        "native/transfer/files/direct.cc",
        "native/transfer/files/read.cc",
        "native/transfer/files/write.cc",
        "native/transfer/files/page_cache.cc",
        "native/transfer/cuda_ring.cc",
        "native/allocator/async.cc",
        "native/allocator/backend.cc",
        "native/allocator/bfc.cc",
        "native/allocator/group.cc",
        "native/bench/transfer.cc",
        "native/bench/alloc.cc",
        "native/bench/devices.cc",
        "native/bench/managed.cc",
        "native/core/base/errno_name.cc",
        "native/core/base/shm.cc",
        "native/core/base/file_replace.cc",
        "native/core/device/numa.cc",
        "native/core/device/peer_grants.cc",
        "native/core/device/platform_limits.cc",
        "native/core/device/topology.cc",
        "native/core/memory/ipc_record.cc",
        "native/core/transfer/copy_team.cc",
        "native/core/transfer/peer_schedule.cc",
        "native/core/transfer/staging_pipeline.cc",
        "native/core/transfer/file_pipeline.cc",
        "native/core/allocator/budget.cc",
        "native/core/allocator/compose.cc",
        "native/core/allocator/footprint.cc",
        "native/core/allocator/group_upstream.cc",
        "native/core/allocator/elastic.cc",
        "native/core/allocator/ledger.cc",
        "native/core/allocator/policy.cc",
        "native/core/allocator/pool.cc",
        "native/core/allocator/uncharged.cc",
        "native/core/allocator/upstream.cc",
        "native/core/allocator/upstream_contract.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native"],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_CPP_EXCEPTIONS",
        "NODE_ADDON_API_CPP_EXCEPTIONS_ALL",
        "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS",
        "NODE_ADDON_API_DISABLE_DEPRECATED"
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "conditions": [
        ["static_cxx==1", { "ldflags": ["-static-libstdc++"], "sources": ["native/base/glibc_compat.cc"] }],
        [
          "cuda_home==''",
          { "defines": ["CUDA_MEMORY_NO_CUDA"] },
          {
            "include_dirs": ["<(cuda_home)/include"],
            "libraries": ["<(cuda_lib)/libcudart_static.a", "-ldl", "-lpthread", "-lrt"]
          }
        ]
      ]
    },
    {
      # The interposer (native/allocator/preload/interpose.cc): a plain shared library, preloaded
      # into any CUDA program, that links no CUDA and no Node. It declares the driver's few types
      # itself (native/allocator/preload/cuda_abi.h), so it builds without a CUDA toolkit too. Only
      # the interposed entry points are exported (an unversioned list, so that they bind whatever
      # glibc or driver symbol version the program asks for); the C++ runtime stays private.
      "target_name": "cuda_memory_preload",
      "type": "shared_library",
      "product_prefix": "",
      "product_extension": "so",
      "sources": [
        "native/allocator/preload/arrays.cc",
        "native/allocator/preload/charge.cc",
        "native/allocator/preload/contexts.cc",
        "native/allocator/preload/driver.cc",
        "native/allocator/preload/graphs.cc",
        "native/allocator/preload/interpose.cc",
        "native/allocator/preload/loader.cc",
        "native/allocator/preload/member.cc",
        "native/allocator/preload/memory.cc",
        "native/allocator/preload/nvml.cc",
        "native/allocator/preload/pools.cc",
        "native/allocator/preload/recorder.cc",
        "native/allocator/preload/streams.cc",
        "native/allocator/preload/vmm.cc",
        "native/core/base/shm.cc",
        "native/core/allocator/footprint.cc",
        "native/core/allocator/grants.cc",
        "native/core/allocator/elastic.cc",
        "native/core/allocator/ledger.cc",
        "native/core/allocator/pool.cc",
        "native/core/allocator/reserve_charge.cc",
        "native/core/allocator/tenant_view.cc",
        "native/core/allocator/uncharged.cc",
        "native/core/allocator/vmm_accounting.cc"
      ],
      "include_dirs": ["native"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags": ["-fvisibility=hidden"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      # $(srcdir) is make's relative path to this folder (".."): gyp writes ldflags into the Makefile
      # unquoted, so an absolute path would split at a space in a folder's name.
      "ldflags": ["-Wl,--version-script=$(srcdir)/native/allocator/preload/exports.map", "-Wl,--no-undefined"],
      "libraries": ["-ldl", "-lpthread"],
      "conditions": [
        ["static_cxx==1", { "ldflags": ["-static-libstdc++"], "sources": ["native/base/glibc_compat.cc"] }]
      ]
    }
  ]
}
