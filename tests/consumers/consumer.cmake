# attnref_consumer(<target> <c++ standard> [options...]): the consumer program plus the engine
# translation unit, built as a strict downstream engine would build them: every warning an error,
# no RTTI, plus any extra options (-O2: the warnings only the optimizer's analysis gives).
set(_attnref_consumer_dir ${CMAKE_CURRENT_LIST_DIR})
find_package(Threads REQUIRED)

function(attnref_consumer target standard)
  add_executable(${target} ${_attnref_consumer_dir}/consumer.cpp ${_attnref_consumer_dir}/engine.cpp)
  target_link_libraries(${target} PRIVATE attnref::attnref Threads::Threads)
  target_compile_definitions(${target} PRIVATE ATTNREF_CONSUMER_ENGINE)
  set_target_properties(${target} PROPERTIES CXX_STANDARD ${standard} CXX_STANDARD_REQUIRED ON
                                             CXX_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE
    $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                   -Wsign-conversion -Werror -fno-rtti ${ARGN}>)
endfunction()
