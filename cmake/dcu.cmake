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
