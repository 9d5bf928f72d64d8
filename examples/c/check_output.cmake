# cmake -DPROGRAM=... -DOUTPUT=... -DPYTHON=... -DCHECK=... -DEXPECTED="a;b" -P check_output.cmake
# Runs PROGRAM, saves its stdout in OUTPUT and checks it with CHECK (check_close.py)
# against the EXPECTED files; ctest fails the test if this script fails.
execute_process(COMMAND "${PROGRAM}" OUTPUT_FILE "${OUTPUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} failed: ${rc}")
endif()
file(READ "${OUTPUT}" printed)
message(STATUS "${PROGRAM} printed:\n${printed}")
execute_process(COMMAND "${PYTHON}" "${CHECK}" "${OUTPUT}" ${EXPECTED} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "output of ${PROGRAM} does not match ${EXPECTED}")
endif()
