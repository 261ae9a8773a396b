#include "runtime/storage.h"

#include "runtime/accelerator.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace torch_fl {

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(
      storage->resizable(),
      "Trying to resize storage that is not resizable (flagos storage of ",
      storage->nbytes(),
      " bytes)");
  if (nbytes == storage->nbytes()) {
    return;
  }
  const auto device = storage->device();
  c10::DeviceGuard guard(device);
  c10::DataPtr fresh = storage->allocator()->allocate(nbytes);
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0) {
    accelerator().copy_bytes(fresh.get(), storage->data(), keep);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

} // namespace torch_fl
