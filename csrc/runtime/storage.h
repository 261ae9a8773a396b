#pragma once

#include "macros.h"

#include <c10/core/StorageImpl.h>

namespace torch_fl {

// Grows or shrinks a flagos storage to exactly nbytes, keeping the leading bytes. Every view of
// the storage sees the new memory (the StorageImpl is updated in place, as native resize does).
FLAGOS_API void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

} // namespace torch_fl
