# `pdspark generate --device cuda`: with a GPU, the CPU's greedy tokens; without one (CI), a
# clear error naming CUDA and what to check, never a crash. `--device` with another value is
# refused by the flag check. Invoked by CTest with -DPDSPARK=... -DMODEL=...
set(args generate --model ${MODEL} --prompt-ids 1,2,3,4,5 --max-tokens 6 --ignore-eos
         --spec-method none)
execute_process(COMMAND ${PDSPARK} ${args} --device cpu
                OUTPUT_VARIABLE cpu RESULT_VARIABLE cpu_rc ERROR_VARIABLE cpu_err)
if(NOT cpu_rc EQUAL 0)
  message(FATAL_ERROR "pdspark generate --device cpu failed (${cpu_rc}): ${cpu_err}")
endif()
execute_process(COMMAND ${PDSPARK} ${args} --device cuda
                OUTPUT_VARIABLE cuda RESULT_VARIABLE cuda_rc ERROR_VARIABLE cuda_err)
if(cuda_rc EQUAL 0)
  if(NOT cuda STREQUAL cpu)
    message(FATAL_ERROR "greedy tokens on cuda (${cuda}) differ from cpu (${cpu})")
  endif()
elseif(NOT cuda_rc EQUAL 2 OR NOT cuda_err MATCHES "CUDA" OR NOT cuda_err MATCHES "check|rebuild")
  message(FATAL_ERROR "--device cuda without a GPU must fail (exit 2) naming CUDA and what to "
                      "do; got ${cuda_rc}: ${cuda_err}")
endif()
execute_process(COMMAND ${PDSPARK} ${args} --device tpu
                RESULT_VARIABLE bad_rc ERROR_VARIABLE bad_err)
if(bad_rc EQUAL 0 OR NOT bad_err MATCHES "--device")
  message(FATAL_ERROR "--device tpu should be refused naming the flag; got ${bad_rc}: ${bad_err}")
endif()
