// The cuda accelerator: flagos:N is cuda:N; memory, streams, events and RNG are torch's CUDA
// ones, and the `cuda` route runs the installed torch's CUDA kernels on zero-copy aliases.

//
// Only device-generic torch APIs (guard and allocator registries, CUDA hooks, ATen ops) and the
// CUDA runtime API are used: no c10::cuda symbols, which the hipified DCU torch does not export.

#include "runtime/accelerator.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_device_allocator.h"
#include "runtime/cuda/cuda_guard.h"
#include "runtime/cuda/cuda_host_allocator.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_fl {
namespace {

class CudaAccelerator final : public Accelerator {
 public:
  const char* name() const override {
    return FLAGOS_ACCELERATOR_NAME; // "cuda", or "dcu" for the hipified build
  }
  c10::DeviceType native_device_type() const override {
    return c10::DeviceType::CUDA;
  }
  c10::DispatchKey native_dispatch_key() const override {
    return c10::DispatchKey::CUDA;
  }
  c10::Device native_device(c10::DeviceIndex index) const override {
    return c10::Device(c10::DeviceType::CUDA, index);
  }
  c10::DeviceIndex device_count() const noexcept override {
    // No CUDA guard registered (dcu without DTK's device libraries loaded): no device, rather
    // than std::terminate from a throwing lookup in a noexcept function.
    if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
      return 0;
    }
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount();
  }
  const c10::impl::DeviceGuardImplInterface& guard() const override {
    return guard_;
  }
  c10::DeviceAllocator* device_allocator() override {
    return &device_allocator_;
  }
  c10::Allocator* native_allocator() const override {
    cuda::ensure_cuda_initialized();
    return c10::GetAllocator(c10::DeviceType::CUDA);
  }
  at::HostAllocator* host_allocator() override {
    return &host_allocator_;
  }
  bool is_pinned_ptr(const void* ptr) const override {
    // As torch.cuda answers it: nothing is pinned before CUDA has a context, and asking CUDA
    // then would make one (`cpu_tensor.is_pinned()` must not start the device).
    const auto& cuda = at::detail::getCUDAHooks();
    bool any_context = false;
    for (c10::DeviceIndex i = 0; i < device_count() && !any_context; ++i) {
      any_context = cuda.hasPrimaryContext(i);
    }
    return any_context && cuda.isPinnedPtr(ptr);
  }
  c10::Device device_from_ptr(void* ptr) const override {
    const auto device = at::detail::getCUDAHooks().getDeviceFromPtr(ptr);
    return c10::Device(c10::DeviceType::PrivateUse1, device.index());
  }
  void copy_bytes(void* dst, const void* src, size_t nbytes) const override {
    if (nbytes == 0) {
      return;
    }
    // An ATen copy of byte views: on the current stream, ordered with the kernels around it.
    const auto options =
        at::TensorOptions().dtype(at::kByte).device(native_device(guard_.getDevice().index()));
    const auto size = static_cast<int64_t>(nbytes);
    at::from_blob(dst, {size}, options)
        .copy_(at::from_blob(const_cast<void*>(src), {size}, options));
  }
  c10::DataPtr adopt_native(c10::DataPtr&& native, size_t, c10::DeviceIndex index) override {
    // CUDA kernels allocate from the same pool: nothing to account, only relabel.
    native.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, index));
    return std::move(native);
  }
  at::Generator make_native_generator(c10::DeviceIndex index) const override {
    cuda::ensure_cuda_initialized();
    return at::detail::getCUDAHooks().getNewGenerator(index);
  }
  at::Generator default_native_generator(c10::DeviceIndex index) const override {
    cuda::ensure_cuda_initialized();
    return at::detail::getCUDAHooks().getDefaultGenerator(index);
  }
  DeviceProperties properties(c10::DeviceIndex index) const override {
    check_device_index(index);
    cudaDeviceProp prop{};
    FLAGOS_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    DeviceProperties p;
    p.name = prop.name;
    p.major = prop.major;
    p.minor = prop.minor;
    p.total_memory = prop.totalGlobalMem;
    p.multi_processor_count = prop.multiProcessorCount;
    return p;
  }

 private:
  cuda::CudaGuardImpl guard_;
  cuda::CudaDeviceAllocator device_allocator_;
  cuda::CudaHostAllocator host_allocator_;
};

} // namespace

Accelerator& accelerator() {
  // Never destroyed: threads torch does not join (autograd's, a collective's) may still free
  // device memory while the process exits.
  static auto* instance = new CudaAccelerator();
  return *instance;
}

} // namespace torch_fl
