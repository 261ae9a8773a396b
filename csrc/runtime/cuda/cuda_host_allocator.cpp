#include "runtime/cuda/cuda_host_allocator.h"

#include "runtime/cuda/cuda_device_allocator.h"
#include "runtime/cuda/cuda_guard.h"

namespace torch_fl::cuda {

at::HostAllocator& CudaHostAllocator::pool() {
  ensure_cuda_initialized();
  static at::HostAllocator* cuda = at::getHostAllocator(c10::DeviceType::CUDA);
  return *cuda;
}

c10::DataPtr CudaHostAllocator::allocate(size_t nbytes) {
  return pool().allocate(nbytes);
}

c10::DeleterFnPtr CudaHostAllocator::raw_deleter() const {
  return pool().raw_deleter();
}

void CudaHostAllocator::copy_data(void* dst, const void* src, std::size_t count) const {
  pool().copy_data(dst, src, count);
}

bool CudaHostAllocator::record_event(void* ptr, void* ctx, c10::Stream stream) {
  const auto native =
      stream.device_type() == c10::DeviceType::PrivateUse1 ? to_cuda(stream) : stream;
  return pool().record_event(ptr, ctx, native);
}

void CudaHostAllocator::empty_cache() {
  pool().empty_cache();
}

at::HostStats CudaHostAllocator::get_stats() {
  return pool().get_stats();
}

void CudaHostAllocator::reset_accumulated_stats() {
  pool().reset_accumulated_stats();
}

void CudaHostAllocator::reset_peak_stats() {
  pool().reset_peak_stats();
}

} // namespace torch_fl::cuda
