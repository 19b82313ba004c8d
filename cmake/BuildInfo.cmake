# Script mode (cmake -DSOURCE_DIR=... -DOUTPUT=... -P BuildInfo.cmake), run at every build: writes
# the commit the binary is built from into OUTPUT (a header for `linac --version`), touching the
# file only when the commit changed so that nothing recompiles otherwise.
find_package(Git QUIET)
set(commit "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --always --dirty --abbrev=12
                  OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND described)
    set(commit "${described}")
  endif()
endif()
set(content "// Written by cmake/BuildInfo.cmake at build time.\n#pragma once\n#define LINAC_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} previous)
endif()
if(NOT "${previous}" STREQUAL "${content}")
  file(WRITE ${OUTPUT} "${content}")
endif()
