# Sourced by the suites: one PASS/FAIL/SKIP line from a test's exit status.
# report_result NAME RC TIMEOUT WHY [PASS_EXTRA [SKIP_WHY]]
#   RC 0 is PASS (PASS_EXTRA appended); 124/137 (timeout's kill) a timeout;
#   above 128 a signal; 77 is SKIP only when SKIP_WHY is given (a suite whose
#   programs never skip passes four arguments, so 77 stays a failure).
report_result() {
  local name=$1 rc=$2 tmo=$3 why=$4 extra=${5:-}
  if [ "$rc" -eq 0 ]; then
    echo "PASS $name${extra:+ $extra}"
  elif [ "$rc" -eq 77 ] && [ $# -ge 6 ]; then
    echo "SKIP $name $6"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL $name timed out after ${tmo}s $why"
  elif [ "$rc" -gt 128 ]; then
    echo "FAIL $name killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null)) $why"
  else
    echo "FAIL $name exit $rc: $why"
  fi
}
