// share_worker: a GPU-bound driver-API program for the compute-share
// measurements (hook_shares.cc). It launches kernels back to back on the
// primary context and synchronises every ~20 ms of queued work (a training
// step's worth: the way frameworks wait for a loss value), until `ms` have
// passed. Linked against the fake libcuda; the hook comes in with
// LD_PRELOAD. The kernel's length is the fake's HF_FAKE_CUDA_KERNEL_US.
//
//   share_worker <kernel|coop|graph> <ms> <kernel_us> [duty_percent]
//
// With a duty below 100 it is GPU-bound only that share of each 100 ms: it
// queues duty% of 100 ms of kernels, waits for them, and sleeps out the
// rest of the period (a process with a steady, modest demand).
//
// Prints {"launches": N} and exits 0, or a line naming what failed and 1.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

namespace {

long long NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

int Fail(const char* what, CUresult rc) {
  fprintf(stderr, "share_worker: %s failed (%d)\n", what, static_cast<int>(rc));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr,
            "usage: share_worker <kernel|coop|graph> <ms> <kernel_us> "
            "[duty_percent]\n");
    return 2;
  }
  const char* path = argv[1];
  const long long ms = atoll(argv[2]);
  const long long kernel_us = atoll(argv[3]);
  const long long duty = argc == 5 ? atoll(argv[4]) : 100;
  if (kernel_us <= 0 || duty <= 0 || duty > 100) {
    fprintf(stderr, "share_worker: kernel_us > 0 and duty 1..100\n");
    return 2;
  }
  const long long sync_every = kernel_us >= 20'000 ? 1 : 20'000 / kernel_us;
  CUresult rc = cuInit(0);
  if (rc != CUDA_SUCCESS) return Fail("cuInit", rc);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if ((rc = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS) return Fail("device", rc);
  if ((rc = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS ||
      (rc = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
    return Fail("context", rc);
  }
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  static const char kImage[] = "fake image";
  if ((rc = cuModuleLoadData(&mod, kImage)) != CUDA_SUCCESS ||
      (rc = cuModuleGetFunction(&fn, mod, "k")) != CUDA_SUCCESS) {
    return Fail("module", rc);
  }
  CUgraphExec exec = nullptr;
  if (strcmp(path, "graph") == 0) {
    CUgraph graph = nullptr;
    if ((rc = cuGraphCreate(&graph, 0)) != CUDA_SUCCESS ||
        (rc = cuGraphInstantiateWithFlags(&exec, graph, 0)) != CUDA_SUCCESS) {
      return Fail("graph", rc);
    }
  } else if (strcmp(path, "kernel") != 0 && strcmp(path, "coop") != 0) {
    fprintf(stderr, "share_worker: launch path must be kernel|coop|graph\n");
    return 2;
  }
  const long long start = NowMs();
  long long launches = 0;
  if (duty < 100) {
    const long long per_period = duty * 100'000 / 100 / kernel_us;
    for (long long period = 0; NowMs() - start < ms; ++period) {
      for (long long i = 0; i < (per_period > 0 ? per_period : 1); ++i) {
        rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
        if (rc != CUDA_SUCCESS) return Fail("launch", rc);
        ++launches;
      }
      cuCtxSynchronize();
      const long long next = start + (period + 1) * 100;
      const long long now = NowMs();
      if (next > now) {
        timespec ts{static_cast<time_t>((next - now) / 1000),
                    static_cast<long>((next - now) % 1000) * 1'000'000};
        nanosleep(&ts, nullptr);
      }
    }
    printf("{\"launches\": %lld}\n", launches);
    return 0;
  }
  while (NowMs() - start < ms) {
    if (exec != nullptr) {
      rc = cuGraphLaunch(exec, nullptr);
    } else if (path[0] == 'c') {
      rc = cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr);
    } else {
      rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    }
    if (rc != CUDA_SUCCESS) return Fail("launch", rc);
    if (++launches % sync_every == 0) cuCtxSynchronize();
  }
  cuCtxSynchronize();
  printf("{\"launches\": %lld}\n", launches);
  return 0;
}
