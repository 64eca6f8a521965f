# `pdspark generate --json` prints the JSON alone on stdout, with speculation on `auto` (whose
# cost profiling logs a line) and the KV pool logging its size: logs go to stderr. Invoked by
# CTest with -DPDSPARK=... -DMODEL=...
execute_process(
  COMMAND ${PDSPARK} generate --model ${MODEL} --prompt "ROMEO:" --max-tokens 8 --ignore-eos
          --spec-method dspark --spec-tokens auto --json
  OUTPUT_VARIABLE json RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pdspark generate failed (${rc}): ${err}")
endif()
string(JSON generated ERROR_VARIABLE parse_error LENGTH "${json}" token_ids)
if(parse_error)
  message(FATAL_ERROR "stdout is not the JSON alone (${parse_error}):\n${json}")
endif()
if(NOT generated EQUAL 8)
  message(FATAL_ERROR "${generated} tokens, expected 8: ${json}")
endif()
if(NOT err MATCHES "kv pool")
  message(FATAL_ERROR "the KV pool's log line should be on stderr, got:\n${err}")
endif()
