# The DCU ABI shim library, generated from a symbol list (see csrc/vendor/dcu/abi_shim_symbols.txt).
#
#   flagos_dcu_abi_shim(<target> <symbols.txt> <output dir>)
#
# builds lib<target>.so in <output dir> (the bundle directory, torch_fl/lib_dcu). Needs only a C++
# compiler and Python, so tests build it against fixture symbol lists.

include_guard(GLOBAL)
find_package(Python3 COMPONENTS Interpreter REQUIRED)

function(flagos_dcu_abi_shim target symbols out_dir)
  set(generator "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../scripts/vendor/gen_dcu_abi_shim.py")
  set(source "${CMAKE_CURRENT_BINARY_DIR}/${target}.cpp")
  add_custom_command(OUTPUT "${source}"
    COMMAND Python3::Interpreter "${generator}" "${symbols}" "${source}"
    DEPENDS "${symbols}" "${generator}"
    COMMENT "Generating the DCU ABI shim from ${symbols}")
  add_library(${target} SHARED "${source}")
  set_target_properties(${target} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY "${out_dir}"
    CXX_VISIBILITY_PRESET hidden)
endfunction()
