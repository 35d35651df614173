# Writes OUT (a header defining HYDRAGEN_GIT_COMMIT) from `git rev-parse HEAD` of SOURCE_DIR,
# with "-dirty" when tracked files differ from that commit. Run at every build, so results
# name the commit the binary was built from, not the one CMake was configured at. The file is
# rewritten only when its text changes, so an unchanged commit recompiles nothing.
execute_process(COMMAND git rev-parse HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty EQUAL 1)
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "#pragma once\n#define HYDRAGEN_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
