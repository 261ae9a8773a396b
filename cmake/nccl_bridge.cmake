# The NCCL bridge: torch_fl.comm._nccl_ext._flagos_nccl (csrc/comm/nccl_bridge/), a Python
# module that constructs torch's own c10d::ProcessGroupNCCL, for torches whose Python bindings
# lack torch.distributed.ProcessGroupNCCL (DCU: the official CPU torch over DTK's libtorch_hip).
# Optional: without nccl.h (or the CUDA library headers torch's CUDA context includes) it is
# skipped with a message, and the NCCL tier then needs torch's own class.
#
# flagos_nccl_bridge(<include dirs> <libraries> <rpath> <definitions>)
function(flagos_nccl_bridge include_dirs libraries rpath definitions)
  # pip-installed NVIDIA packages (nvidia-nccl-cu*, nvidia-cusparse, ...) live beside torch.
  get_filename_component(site_packages "${FLAGOS_TORCH_LIBRARY_DIR}/../.." ABSOLUTE)
  file(GLOB nvidia_includes LIST_DIRECTORIES true "${site_packages}/nvidia/*/include")
  find_path(FLAGOS_NCCL_INCLUDE_DIR NAMES nccl.h rccl/rccl.h
    HINTS ENV NCCL_INCLUDE_DIR "$ENV{NCCL_ROOT}/include" ${nvidia_includes} ${include_dirs})
  find_path(FLAGOS_CUSPARSE_INCLUDE_DIR NAMES cusparse.h hipsparse/hipsparse.h
    HINTS ${nvidia_includes} ${include_dirs})
  if(NOT FLAGOS_NCCL_INCLUDE_DIR OR NOT FLAGOS_CUSPARSE_INCLUDE_DIR)
    message(STATUS "torch_fl: NCCL bridge not built (nccl.h: ${FLAGOS_NCCL_INCLUDE_DIR}, "
      "cusparse.h: ${FLAGOS_CUSPARSE_INCLUDE_DIR}); set NCCL_INCLUDE_DIR to build it")
    return()
  endif()
  string(REGEX REPLACE "^_C" "_flagos_nccl" module_name "${FLAGOS_EXT_NAME}")
  add_library(flagos_nccl_bridge MODULE ${CMAKE_SOURCE_DIR}/csrc/comm/nccl_bridge/flagos_nccl.cpp)
  # `include_dirs` first: on dcu they hold DTK torch's own headers, which must win over the
  # official torch's (they describe the ProcessGroupNCCL inside DTK's libtorch_hip.so).
  target_include_directories(flagos_nccl_bridge SYSTEM BEFORE PRIVATE ${include_dirs}
    ${FLAGOS_NCCL_INCLUDE_DIR} ${FLAGOS_CUSPARSE_INCLUDE_DIR} ${FLAGOS_TORCH_INCLUDE_DIRS}
    ${Python_INCLUDE_DIR})
  target_compile_definitions(flagos_nccl_bridge PRIVATE USE_C10D_NCCL=1 ${definitions})
  target_link_libraries(flagos_nccl_bridge PRIVATE ${libraries} ${TORCH_PYTHON_LIB} ${TORCH_CPU_LIB}
    ${C10_LIB})
  set_target_properties(flagos_nccl_bridge PROPERTIES
    PREFIX "" OUTPUT_NAME "${module_name}" SUFFIX ""
    LIBRARY_OUTPUT_DIRECTORY ${FLAGOS_PACKAGE_DIR}/comm/_nccl_ext
    BUILD_RPATH "${rpath}" INSTALL_RPATH "${rpath}")
  message(STATUS "torch_fl: NCCL bridge ${module_name} (nccl.h in ${FLAGOS_NCCL_INCLUDE_DIR})")
endfunction()
