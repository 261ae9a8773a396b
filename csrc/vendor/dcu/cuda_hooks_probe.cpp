// libflagos_dcu_probe.so: tells torch_fl (via ctypes) whether torch's CUDA hooks are the ones a
// loaded device library registered. torch creates its CUDA hooks once, on first use, from
// CUDAHooksRegistry; if that happened before DTK's libtorch_hip.so was loaded, torch keeps the
// stub forever and the HIP kernels are registered but unreachable by device init.
//
// Uses only device-generic torch headers; links libtorch_cpu. No DCU needed to build or test it.

#include <ATen/detail/CUDAHooksInterface.h>

#include <typeinfo>

// 0: the hooks are a registered implementation; 1: the stub is cached although an
// implementation is registered now (half-wired); 2: no implementation is registered (stub).
extern "C" __attribute__((visibility("default"))) int flagos_dcu_cuda_hooks_state() {
  // The registry lives in `at` (older releases: `at::detail`); resolve it either way.
  using namespace at;
  using namespace at::detail;
  const bool registered = CUDAHooksRegistry()->Has("CUDAHooks");
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  if (typeid(hooks) != typeid(at::CUDAHooksInterface)) {
    return 0;
  }
  return registered ? 1 : 2;
}
