# Speculation is on by default when the checkpoint carries a DSpark drafter (--spec-method auto)
# and off when it has none or with --spec-method none. Invoked by CTest with -DPDSPARK=...
# -DMODEL=... (with a drafter) -DPLAIN_MODEL=... (without one).
function(drafts model out)
  execute_process(
    COMMAND ${PDSPARK} generate --model ${model} --prompt-ids 0,17,42,99,7,256,3,18 --max-tokens 16
            --ignore-eos --spec-tokens 3 --json ${ARGN}
    OUTPUT_VARIABLE json RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pdspark generate ${ARGN} on ${model} failed (${rc}): ${err}")
  endif()
  string(JSON n GET "${json}" num_drafts)
  set(${out} ${n} PARENT_SCOPE)
endfunction()

drafts(${MODEL} by_default)
if(NOT by_default GREATER 0)
  message(FATAL_ERROR "no DSpark rounds by default on a checkpoint with a drafter")
endif()
drafts(${MODEL} turned_off --spec-method none)
if(NOT turned_off EQUAL 0)
  message(FATAL_ERROR "--spec-method none still drafted (${turned_off} rounds)")
endif()
drafts(${PLAIN_MODEL} without_drafter)
if(NOT without_drafter EQUAL 0)
  message(FATAL_ERROR "drafted (${without_drafter} rounds) without a drafter")
endif()
