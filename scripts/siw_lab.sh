# Sourced by the scripts that run siw in the lab VM against our iwperf (siw_kill_capture.sh,
# siw_send_stall.sh): moves to the repository, names the lab (LAB_CACHE defaults to
# /var/tmp/siw-lab-cache), builds iwperf, and gives `lab_serve`.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LAB_CACHE=${LAB_CACHE:-/var/tmp/siw-lab-cache}
lab=/work/shared/lab/siw/run-lab.sh
[ -x "$lab" ] || lab=../shared/lab/siw/run-lab.sh
cargo build -q -p examples --bin iwperf

# lab_serve SECS PARAMS CMD: the lab VM (siw module parameters PARAMS) running CMD, in the
# background as LAB_PID; returns once the VM serves (at most 2 minutes).
lab_serve() {
  local err
  err=$(mktemp)
  "$lab" serve "$1" "$2" "$3" 2>"$err" &
  LAB_PID=$!
  for _ in $(seq 120); do grep -q "is serving" "$err" && break; sleep 1; done
  rm -f "$err"
}
