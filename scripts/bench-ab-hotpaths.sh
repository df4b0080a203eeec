#!/bin/bash
# A/B of the FM hot paths across two fm-bench builds, alternating run by run.
# Usage: scripts/bench-ab-hotpaths.sh OLD_FM_BENCH NEW_FM_BENCH   (RUNS, default 7)
OLD=${1:?old fm-bench}; NEW=${2:?new fm-bench}
for i in $(seq "${RUNS:-7}"); do for b in $OLD $NEW; do
  tag=$([ $b = $OLD ] && echo old || echo new)
  dev=$($b overhead --json 2>/dev/null | grep '"layer":"device"' | grep -o '"median_us":[0-9.]*' | cut -d: -f2)
  pp=$($b pingpong --sizes 8,1024,65536 --json 2>/dev/null | grep -o '"median_us":[0-9.]*' | cut -d: -f2 | tr '\n' ' ')
  rt=$($b rate --json 2>/dev/null | grep -o '"mmsg_s":[0-9.]*' | head -1 | cut -d: -f2)
  pc=$($b pollcost --json 2>/dev/null | grep -o '"[a-z_]*ns[a-z_]*":[0-9.]*' | tr '\n' ' ')
  echo "$tag dev8=$dev pp=$pp rate=$rt $pc"
done; done
