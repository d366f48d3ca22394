# karma_add_sim_program(NAME SOURCES... [LIBS LIBS...]): a program whose kernels are written for simcuda
# (tests/apps/common/sim_kernel.h), linked like the trainer apps against the toolkit's libcudart with no run path,
# so that the loader's search (scripts/simrun's LD_LIBRARY_PATH) decides which implementation runs.
function(karma_add_sim_program name)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  add_executable(${name} ${ARG_UNPARSED_ARGUMENTS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/apps ${PROJECT_SOURCE_DIR}/tests/simcuda/include
    ${KARMA_CUDA_INCLUDE})
  target_link_directories(${name} PRIVATE ${KARMA_CUDA_ROOT}/lib64)
  target_link_libraries(${name} PRIVATE cudart ${ARG_LIBS})
  set_target_properties(${name} PROPERTIES SKIP_BUILD_RPATH ON)
endfunction()
