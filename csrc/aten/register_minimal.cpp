// Registration of the operators flagos implements itself (csrc/aten/native/).

#include "aten/native/attention.h"
#include "aten/native/convolution.h"
#include "aten/native/dropout.h"
#include "aten/native/histc.h"
#include "aten/native/minimal.h"
#include "aten/native/predicted_layouts.h"
#include "aten/native/rnn_cells.h"
#include "aten/native/sync_batch_norm.h"
#include "aten/routing/router.h"

#include <ATen/ops/nonzero_static_ops.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

namespace torch_fl {
namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(native::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(native::empty_strided));
  m.impl("as_strided", TORCH_FN(native::as_strided));
  m.impl("view", TORCH_FN(native::view));
  m.impl("_reshape_alias", TORCH_FN(native::reshape_alias));
  // Device-generic metadata views: as flagos kernels they share the caller's storage on every
  // route (a copying cpu_fallback would return copies that autograd takes for views).
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", TORCH_FN(native::resize_));
  m.impl("_copy_from", TORCH_FN(native::copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(native::copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(native::local_scalar_dense));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(native::set_storage));
  m.impl("set_.source_Storage", TORCH_FN(native::set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(native::set_source_tensor));
  m.impl("set_", TORCH_FN(native::set_empty));
  m.impl("is_set_to", TORCH_FN(native::is_set_to));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(native::has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(native::record_stream));
  m.impl("convolution_overrideable", TORCH_FN(native::convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(native::convolution_backward_overrideable));
  m.impl("convolution_backward", TORCH_FN(native::convolution_backward));
#if !defined(FLAGOS_ACCELERATOR_CPU)
  // scaled_dot_product_attention's route to the native flash-attention kernels.
  m.impl(
      "_scaled_dot_product_fused_attention_overrideable",
      TORCH_FN(native::fused_attention_overrideable));
  m.impl(
      "_scaled_dot_product_fused_attention_overrideable_backward",
      TORCH_FN(native::fused_attention_overrideable_backward));
#endif
#if !defined(FLAGOS_BUILD_BOXING)
  // No native device kernels to route these to (only CUDA has them): elementwise versions.
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(native::fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(native::fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(native::fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(native::fused_gru_cell_backward));
  // nn.SyncBatchNorm's statistics kernels.
  m.impl("batch_norm_stats", TORCH_FN(native::batch_norm_stats));
  m.impl("batch_norm_gather_stats", TORCH_FN(native::batch_norm_gather_stats));
  m.impl(
      "batch_norm_gather_stats_with_counts", TORCH_FN(native::batch_norm_gather_stats_with_counts));
  m.impl("batch_norm_elemt", TORCH_FN(native::batch_norm_elemt));
  m.impl("batch_norm_backward_reduce", TORCH_FN(native::batch_norm_backward_reduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(native::batch_norm_backward_elemt));
  // CPU's histc refuses the integer tensors CUDA's counts.
  m.impl("histc", TORCH_FN(native::histc));
  m.impl("histc.out", TORCH_FN(native::histc_out));
  routing::note_kernel_reaches_router("aten::histc"); // its floating calls
  routing::note_kernel_reaches_router("aten::histc.out");
  // Laid out as torch's fake tensors predict for a non-CPU device (predicted_layouts.h).
  m.impl("nonzero_static", TORCH_FN(native::ColumnMajorIndices<at::_ops::nonzero_static>::run));
  routing::note_kernel_reaches_router("aten::nonzero_static");
#endif
#if defined(FLAGOS_ACCELERATOR_CPU)
  // On device accelerators the native dropout kernel already draws from the device's default
  // generator, which backs the flagos one.
  m.impl("native_dropout", TORCH_FN(native::native_dropout));
#endif
}

// Also answered above autograd, where CPU and CUDA answer it (the CompositeImplicitAutograd
// kernel): with a PrivateUse1 kernel alone, AutogradPrivateUse1 falls through and dispatch modes
// and make_fx would see the query as an operator call (`param.data = t` under SchemaCheckMode).
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(native::has_compatible_shallow_copy_type));
}

} // namespace
} // namespace torch_fl
