# Runs `pdspark generate` greedily at --tensor-parallel-size 1 and 4 (with and without DSpark)
# and fails unless all print the same token ids. Invoked by CTest with -DPDSPARK=... -DMODEL=...
function(generate tp spec out)
  execute_process(
    COMMAND ${PDSPARK} generate --model ${MODEL} --prompt "ROMEO: What light" --max-tokens 24
            --ignore-eos --spec-method ${spec} --spec-tokens 4 --tensor-parallel-size ${tp} --json
    OUTPUT_VARIABLE json RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pdspark generate --tensor-parallel-size ${tp} failed (${rc}): ${err}")
  endif()
  string(JSON ids GET "${json}" token_ids)
  string(JSON generated LENGTH "${json}" token_ids)
  if(NOT generated EQUAL 24)
    message(FATAL_ERROR "TP=${tp} ${spec}: ${generated} tokens, expected 24: ${json}")
  endif()
  set(${out} "${ids}" PARENT_SCOPE)
endfunction()

generate(1 none reference)
foreach(run "4;none" "4;dspark")
  list(GET run 0 tp)
  list(GET run 1 spec)
  generate(${tp} ${spec} ids)
  if(NOT ids STREQUAL reference)
    message(FATAL_ERROR "TP=${tp} spec=${spec} gave ${ids}, TP=1 gave ${reference}")
  endif()
  message(STATUS "TP=${tp} spec=${spec}: ${ids}")
endforeach()
