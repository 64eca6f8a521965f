# pdspark_test(NAME SOURCES ... DEPS ... [LABELS ...]): one GoogleTest binary registered with CTest.
function(pdspark_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(${name} PRIVATE PDSPARK_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# pdspark_vectorize_loops(TARGET): let GCC vectorise the target's plain loops at -O2. GCC 12's
# -O2 vectorises only loops whose trip count is a known multiple of the vector width ("very
# cheap" cost model), so the element-wise loops built for AVX-512 with target_clones stayed
# scalar. Vectorisation reorders no floating-point reduction, so it changes no bit.
function(pdspark_vectorize_loops target)
  target_compile_options(${target} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-fvect-cost-model=dynamic>)
endfunction()
