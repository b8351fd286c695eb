# mm's llama-server build includes this file with -DCMAKE_PROJECT_INCLUDE (the tuned build only).
# Once every target is defined, the C++ libraries made of many small files are compiled as unity batches:
# the same large headers (nlohmann/json, the STL) are parsed once per batch of 8 files instead of once per
# file. On 2 cores this took the build from 7:40 to 5:56 (811 to 660 CPU-seconds). mtmd-helper guards
# against being compiled with mtmd's internal headers, so it stays on its own. -DMM_UNITY=OFF turns it off.
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19 AND NOT COMMAND mm_unity_targets
   AND (NOT DEFINED MM_UNITY OR MM_UNITY))
  function(mm_unity_targets)
    foreach(target llama-common server-context llama-server-impl mtmd)
      if(TARGET ${target})
        set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
      endif()
    endforeach()
    if(TARGET mtmd)
      get_target_property(mtmd_dir mtmd SOURCE_DIR)
      file(GLOB helpers ${mtmd_dir}/mtmd-helper*.cpp)
      set_source_files_properties(${helpers} DIRECTORY ${mtmd_dir} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL mm_unity_targets)
endif()
