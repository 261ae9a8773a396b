# The cuda accelerator: links torch's CUDA libraries and the CUDA runtime headers.
find_package(CUDAToolkit REQUIRED)
find_library(C10_CUDA_LIB c10_cuda PATHS ${FLAGOS_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
find_library(TORCH_CUDA_LIB torch_cuda PATHS ${FLAGOS_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
target_link_libraries(torch_fl_core PUBLIC ${C10_CUDA_LIB} ${TORCH_CUDA_LIB} CUDA::cudart)
target_compile_definitions(torch_fl_core PUBLIC USE_CUDA=1)

include(${CMAKE_CURRENT_LIST_DIR}/nccl_bridge.cmake)
flagos_nccl_bridge("${CUDAToolkit_INCLUDE_DIRS}" "${TORCH_CUDA_LIB};${C10_CUDA_LIB};CUDA::cudart"
  "${FLAGOS_TORCH_LIBRARY_DIR}" "USE_CUDA=1")
