# The dcu accelerator (Hygon DCU, DTK). Included by CMakeLists.txt for FLAGOS_ACCELERATOR=dcu.
#
# DTK's torch is a hipified build: its kernels register under the CUDA dispatch key and its
# tensors are DeviceType::CUDA. The cuda accelerator's runtime sources use only device-generic
# torch APIs and the CUDA runtime API, so the same sources serve DCU: they compile with plain host
# g++ against DTK's CUDA compatibility toolkit ($ROCM_PATH/cuda/cuda-*) and link its
# libcudart.so.12 (a shim over libgalaxyhip.so). No nvcc, hipcc or hipify pass.
#
# DTK's device libraries (libtorch_hip.so, libc10_hip.so, libmagma.so) are not linked here: they
# register into torch's device-generic registries when loaded, and torch_fl loads them from the
# bundle (scripts/vendor/bundle_dcu_libtorch.sh) before torch is imported (torch_fl/vendor/dcu.py).

include(${CMAKE_CURRENT_LIST_DIR}/dcu_toolchain.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/dcu_abi_shim.cmake)

option(FLAGOS_DCU_VENDOR_CORE "Legacy layout: bundle DTK's full core set" OFF)
option(FLAGOS_BUILD_VENDOR "No-op on dcu (there is no DCU vendor backend directory)" OFF)

flagos_dcu_locate_toolkit()
flagos_dcu_load_miopen()

if(FLAGOS_BUILD_VENDOR)
  message(STATUS "torch_fl dcu: FLAGOS_BUILD_VENDOR has no DCU backend directory; ignored")
endif()
# DTK ships no liboperators.so, so the FlagGems C++ path is never built on dcu (setup.py records
# BUILD_FLAGGEMS_CPP = False); nothing here consumes FLAGOS_BUILD_FLAGGEMS_CPP.

# The runtime sources of the cuda accelerator, compiled for dcu.
file(GLOB FLAGOS_DCU_RUNTIME_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/csrc/runtime/cuda/*.cpp)
target_sources(torch_fl_core PRIVATE ${FLAGOS_DCU_RUNTIME_SOURCES})
target_include_directories(torch_fl_core SYSTEM PRIVATE ${FLAGOS_DCU_CUDA_INCLUDE_DIR})
target_link_libraries(torch_fl_core PUBLIC ${FLAGOS_DCU_CUDART})
# The bundle directory first (DTK's device libraries), then the CUDA compatibility runtime.
get_filename_component(FLAGOS_DCU_CUDART_DIR "${FLAGOS_DCU_CUDART}" DIRECTORY)
set(FLAGOS_ACCEL_RPATH "$ORIGIN/../lib_dcu;${FLAGOS_DCU_CUDART_DIR}")

# The ABI shim (default layout only): the symbols DTK's device libraries need from their own
# torch core that the official torch core does not export. Its list is a data file.
if(NOT FLAGOS_DCU_VENDOR_CORE)
  flagos_dcu_abi_shim(flagos_dcu_abi_shim
    "${CMAKE_SOURCE_DIR}/csrc/vendor/dcu/abi_shim_symbols.txt"
    "${FLAGOS_PACKAGE_DIR}/lib_dcu")
endif()

# The CUDA-hooks probe torch_fl/vendor/dcu.py uses to refuse a half-wired process.
add_library(flagos_dcu_probe SHARED ${CMAKE_SOURCE_DIR}/csrc/vendor/dcu/cuda_hooks_probe.cpp)
target_include_directories(flagos_dcu_probe SYSTEM PRIVATE ${FLAGOS_TORCH_INCLUDE_DIRS})
target_link_libraries(flagos_dcu_probe PRIVATE ${C10_LIB} ${TORCH_CPU_LIB})
set_target_properties(flagos_dcu_probe PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${FLAGOS_PACKAGE_DIR}/lib
  BUILD_RPATH "${FLAGOS_TORCH_LIBRARY_DIR}"
  INSTALL_RPATH "${FLAGOS_TORCH_LIBRARY_DIR}")

# The NCCL bridge over RCCL (cmake/nccl_bridge.cmake). It constructs the ProcessGroupNCCL compiled
# into DTK's libtorch_hip.so, so it compiles against DTK torch's own (hipified) headers: those of
# FLAGOS_DCU_TORCH_INCLUDE_DIR, else the include/ folder beside DCU_TORCH_LIB_DIR (the torch/lib
# folder the bundle script reads), else a DTK torch under ROCM_PATH. Its torch symbols resolve at
# load time from the bundle torch_fl loads first. Unverified: needs DTK (docs/installation/dcu.md).
include(${CMAKE_CURRENT_LIST_DIR}/nccl_bridge.cmake)
set(FLAGOS_DCU_TORCH_INCLUDE_DIR "" CACHE PATH "DTK torch's include folder, for the NCCL bridge")
if(NOT FLAGOS_DCU_TORCH_INCLUDE_DIR)
  set(candidates "")
  if(DEFINED ENV{DCU_TORCH_LIB_DIR})
    list(APPEND candidates "$ENV{DCU_TORCH_LIB_DIR}/../include")
  endif()
  file(GLOB found LIST_DIRECTORIES true "${ROCM_PATH}/lib/python*/site-packages/torch/include"
    "${ROCM_PATH}/lib64/python*/site-packages/torch/include")
  foreach(dir IN LISTS candidates found)
    if(EXISTS "${dir}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
      get_filename_component(FLAGOS_DCU_TORCH_INCLUDE_DIR "${dir}" ABSOLUTE)
      break()
    endif()
  endforeach()
endif()
if(FLAGOS_DCU_TORCH_INCLUDE_DIR)
  message(STATUS "torch_fl dcu: NCCL bridge against DTK torch headers ${FLAGOS_DCU_TORCH_INCLUDE_DIR}")
  flagos_nccl_bridge(
    "${FLAGOS_DCU_TORCH_INCLUDE_DIR};${FLAGOS_DCU_TORCH_INCLUDE_DIR}/torch/csrc/api/include;${ROCM_PATH}/include;${FLAGOS_DCU_CUDA_INCLUDE_DIR}"
    "" "$ORIGIN/../../lib_dcu;${ROCM_PATH}/lib" "USE_ROCM=1;__HIP_PLATFORM_AMD__=1")
else()
  message(STATUS "torch_fl dcu: NCCL bridge not built: no DTK torch headers found (set "
    "DCU_TORCH_LIB_DIR to DTK torch's torch/lib folder, or FLAGOS_DCU_TORCH_INCLUDE_DIR)")
endif()
