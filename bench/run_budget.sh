# One time bound for a whole benchmark run, shared by the bench scripts (source it).
# Set start_s=$SECONDS and total_s (seconds) first; budget_name names the script in errors.
left() { echo $(( total_s - (SECONDS - start_s) )); }
step_timeout() {  # min(wanted, time left); stops the run when nothing is left
  local want=$1 l
  l=$(left)
  (( l > 10 )) || { echo "${budget_name:-bench}: out of time (${total_s}s)" >&2; exit 1; }
  (( want < l )) && echo "$want" || echo "$l"
}
