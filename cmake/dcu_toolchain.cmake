# DTK (Hygon DCU) toolchain discovery, shared by cmake/dcu.cmake and the configure-only tests.
#
# Nothing here needs a DCU or DTK's torch: it locates the DTK root, the CUDA compatibility
# toolkit inside it and MIOpen's exported config, and repairs that config. Every check fails
# with a message that says what was looked for and where.
#
#   flagos_dcu_locate_toolkit()       sets FLAGOS_DCU_ROCM_PATH, FLAGOS_DCU_CUDA_ROOT,
#                                     FLAGOS_DCU_CUDA_INCLUDE_DIR, FLAGOS_DCU_CUDART
#   flagos_dcu_fix_miopen_librt(tgt)  rewrites the dangling librt.so path on an imported target
#   flagos_dcu_load_miopen()          loads MIOpen's config if DTK ships one and repairs it

include_guard(GLOBAL)

# glibc >= 2.34 folded librt into libc; DTK's exported MIOpen config still names this file.
set(FLAGOS_DCU_DANGLING_LIBRT "/usr/lib/x86_64-linux-gnu/librt.so")

function(flagos_dcu_locate_toolkit)
  # ROCM_PATH: the cache/-D value (setup.py passes it), else the environment (DTK's env.sh
  # exports it), else the default install location.
  if(DEFINED ROCM_PATH AND NOT "${ROCM_PATH}" STREQUAL "")
    set(root "${ROCM_PATH}")
  elseif(DEFINED ENV{ROCM_PATH} AND NOT "$ENV{ROCM_PATH}" STREQUAL "")
    set(root "$ENV{ROCM_PATH}")
  else()
    set(root "/opt/dtk")
  endif()
  if(NOT IS_DIRECTORY "${root}")
    message(FATAL_ERROR
      "FLAGOS_ACCELERATOR=dcu: the DTK root ROCM_PATH=${root} does not exist. Source DTK's "
      "environment (source /opt/dtk/env.sh) or pass ROCM_PATH=<DTK root> to the build.")
  endif()

  # DTK's CUDA compatibility toolkit: $ROCM_PATH/cuda/cuda-<version>, headers + libcudart.so.12
  # (a thin shim over libgalaxyhip.so). The newest version wins if several are installed.
  file(GLOB candidates LIST_DIRECTORIES true "${root}/cuda/cuda-*")
  set(cuda_dirs "")
  foreach(dir IN LISTS candidates)
    if(IS_DIRECTORY "${dir}" AND EXISTS "${dir}/include/cuda_runtime_api.h")
      list(APPEND cuda_dirs "${dir}")
    endif()
  endforeach()
  if(NOT cuda_dirs)
    message(FATAL_ERROR
      "FLAGOS_ACCELERATOR=dcu: no CUDA compatibility toolkit under ${root}/cuda "
      "(looked for ${root}/cuda/cuda-*/include/cuda_runtime_api.h; found: '${candidates}'). "
      "The runtime sources compile with plain g++ against DTK's CUDA compatibility headers; "
      "check that ROCM_PATH points at a complete DTK installation.")
  endif()
  list(SORT cuda_dirs COMPARE NATURAL ORDER DESCENDING)
  list(GET cuda_dirs 0 cuda_root)

  find_library(cudart NAMES cudart libcudart.so.12
    PATHS "${cuda_root}/lib64" "${cuda_root}/lib" NO_DEFAULT_PATH NO_CACHE)
  if(NOT cudart)
    message(FATAL_ERROR
      "FLAGOS_ACCELERATOR=dcu: ${cuda_root} has headers but no libcudart.so / libcudart.so.12 "
      "in lib64/ or lib/; the DTK installation is incomplete.")
  endif()

  set(FLAGOS_DCU_ROCM_PATH "${root}" PARENT_SCOPE)
  set(FLAGOS_DCU_CUDA_ROOT "${cuda_root}" PARENT_SCOPE)
  set(FLAGOS_DCU_CUDA_INCLUDE_DIR "${cuda_root}/include" PARENT_SCOPE)
  set(FLAGOS_DCU_CUDART "${cudart}" PARENT_SCOPE)
  message(STATUS "torch_fl dcu: ROCM_PATH=${root}")
  message(STATUS "torch_fl dcu: CUDA compatibility toolkit ${cuda_root} (${cudart})")
endfunction()

# Replaces the dangling absolute librt path with the linker flag -lrt in the link interface of
# an imported target (both the generic and the per-configuration properties).
function(flagos_dcu_fix_miopen_librt target)
  if(NOT TARGET ${target})
    return()
  endif()
  get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
  set(props INTERFACE_LINK_LIBRARIES IMPORTED_LINK_INTERFACE_LIBRARIES
    IMPORTED_LINK_DEPENDENT_LIBRARIES)
  if(configs)
    foreach(cfg IN LISTS configs)
      list(APPEND props IMPORTED_LINK_INTERFACE_LIBRARIES_${cfg}
        IMPORTED_LINK_DEPENDENT_LIBRARIES_${cfg})
    endforeach()
  endif()
  set(rewritten FALSE)
  foreach(prop IN LISTS props)
    get_target_property(value ${target} ${prop})
    if(value AND "${value}" MATCHES "/usr/lib/x86_64-linux-gnu/librt\\.so")
      string(REPLACE "${FLAGOS_DCU_DANGLING_LIBRT}" "-lrt" value "${value}")
      set_target_properties(${target} PROPERTIES ${prop} "${value}")
      set(rewritten TRUE)
    endif()
  endforeach()
  if(rewritten)
    message(STATUS "torch_fl dcu: rewrote ${FLAGOS_DCU_DANGLING_LIBRT} to -lrt on ${target}")
  endif()
endfunction()

# Loads DTK's exported MIOpen config (if present) and repairs every target it defines. Consumers
# that link MIOpen (directly or through DTK torch's config) then get -lrt instead of a path that
# does not exist on glibc >= 2.34.
function(flagos_dcu_load_miopen)
  find_package(miopen CONFIG QUIET
    HINTS "${FLAGOS_DCU_ROCM_PATH}" "${FLAGOS_DCU_ROCM_PATH}/lib/cmake/miopen"
    NO_DEFAULT_PATH)
  set(FLAGOS_DCU_MIOPEN_FOUND ${miopen_FOUND} PARENT_SCOPE)
  if(NOT miopen_FOUND)
    message(STATUS "torch_fl dcu: no MIOpen CMake config under ${FLAGOS_DCU_ROCM_PATH}")
    return()
  endif()
  get_directory_property(imported IMPORTED_TARGETS)
  foreach(target IN LISTS imported)
    flagos_dcu_fix_miopen_librt(${target})
  endforeach()
endfunction()
