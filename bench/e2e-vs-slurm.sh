#!/bin/bash
# End-to-end benchmark, gangway beside Slurm, on this machine, in one run.
#
# Both systems get NODES emulated nodes of 8 GPUs. Slurm is Debian's
# slurm-wlm 22.05 set up by the peer scripts in shared/peers/slurm (one slurmd
# per node on localhost, GRES GPUs cloned from /dev/null); gangway is
# `gangway bench e2e` (server in-process, NODES `gangway agent --fake-gpus 8`
# subprocesses). The same mix runs through both, one system at a time so they
# do not compete for the CPUs, gangway first (see the note where it runs):
#   1. JOBS one-GPU jobs running `true`  (Slurm: sbatch --wrap=true, one after another),
#      then the same as one job array (Slurm: sbatch --array; gangway: spec.array)
#   2. GANGS jobs of 2 nodes x 8 GPUs      (Slurm: sbatch -N 2 --gres=gpu:8, both --wrap=true
#                                          and --wrap='srun true'; gangway: 2 ranks, one per node)
# and it prints jobs/s and submit->start p50/p99 for both and the ratios.
#
# Needs root (slurmd, mknod) and python3. Takes 3-5 minutes.
#   bench/e2e-vs-slurm.sh
#   PROFILES="tuned default" bench/e2e-vs-slurm.sh   # also stock Slurm
#   GANGWAY=/path/to/gangway JOBS=200 GANGS=20 bench/e2e-vs-slurm.sh   # with gangway-shim beside it
#   RUNS=3 bench/e2e-vs-slurm.sh                     # three runs and the median ratios
# Env: NODES (16) JOBS (1000) GANGS (100) WARMUP (20) PROFILES (tuned) RUNS (1)
#      GANGWAY (default: go build ./cmd/gangway) PEER (shared/peers/slurm)
#      WORK (a new /tmp directory; results stay there) SKIP_SLURM=1 SKIP_GANGWAY=1
#      OUTPUT (discard: gangway's ranks' output to /dev/null, as Slurm's sbatch -o
#      /dev/null here; keep: a log file per stream and rank, gangway's default)
#      NODE_NICE (0): nice value of the emulated nodes' daemons on both sides
#      (gangway's agents and their ranks; Slurm's slurmd, slurmstepd and jobs),
#      which on a real cluster would not share the control plane's CPUs
#      DRIVER (exec): docker runs every gangway rank in a Docker container of
#      an image made from $GANGWAY (its command /gangway version; Slurm's side
#      is unchanged)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PEER=${PEER:-$(cd "$REPO/../shared/peers/slurm" 2>/dev/null && pwd || true)}
NODES=${NODES:-16}; JOBS=${JOBS:-1000}; GANGS=${GANGS:-100}; WARMUP=${WARMUP:-20}; OUTPUT=${OUTPUT:-discard}
NODE_NICE=${NODE_NICE:-0}
DRIVER=${DRIVER:-exec}
PROFILES=${PROFILES:-tuned}
WORK=${WORK:-$(mktemp -d /tmp/e2e-vs-slurm.XXXXXX)}
mkdir -p "$WORK"
STATS="python3 $HERE/e2e_stats.py"
now() { date +%s.%N; }
say() { echo "[$(date +%T)] $*" >&2; }

# RUNS=N: N whole runs (gangway, then Slurm, each time), every table, then
# each phase's N ratios with their median: one run's ratio moves by ±20%
# on a shared 2-core machine.
RUNS=${RUNS:-1}
if [ "$RUNS" -gt 1 ]; then
  if [ -z "${GANGWAY:-}" ]; then
    GANGWAY="$WORK/gangway"
    say "building gangway"
    (cd "$REPO" && go build -o "$GANGWAY" ./cmd/gangway && go build -o "$(dirname "$GANGWAY")/gangway-shim" ./cmd/gangway-shim)
  fi
  for i in $(seq "$RUNS"); do
    say "run $i of $RUNS"
    RUNS=1 WORK="$WORK/run-$i" GANGWAY="$GANGWAY" "$0"
  done
  echo
  $STATS summary "$WORK"/run-*
  exit 0
fi

# ---- Slurm: the phases (run after gangway, below) ----

slurm_wait_done() { # N: wait until N more jobcomp records than $before exist (600 s bound)
  local n=$1 t0; t0=$(now)
  while [ $(( $(wc -l < "$BASE/log/jobcomp.txt") - before )) -lt "$n" ]; do
    if [ "$(echo "$(now) - $t0 > 600" | bc)" = 1 ]; then say "Slurm: timed out waiting for $n jobs"; return 1; fi
    sleep 0.1
  done
}

slurm_phase() { # NAME N RANKS GPUS START_EVENT SBATCH_ARGS...
  local name=$1 n=$2 ranks=$3 gpus=$4 start=$5; shift 5
  local ids="$WORK/slurm-$PROFILE-$name-$start.ids"
  : > "$ids"
  before=$(wc -l < "$BASE/log/jobcomp.txt" 2>/dev/null || echo 0)
  local t0 t1; t0=$(now)
  for _ in $(seq "$n"); do sbatch --parsable --chdir=/tmp -o /dev/null "$@" >> "$ids"; done
  t1=$(now)
  slurm_wait_done "$n"
  sleep 0.5 # let the slurmd logs catch up with the completions
  $STATS slurm --base "$BASE" --ids "$ids" --t0 "$t0" --t1 "$t1" --name "$name" --ranks "$ranks" \
    --gpus "$gpus" --start "$start" --profile "$PROFILE" | tee -a "$WORK/slurm.jsonl" >&2
}

slurm_phase_array() { # NAME N: one sbatch --array of N one-GPU jobs
  local name=$1 n=$2
  local ids="$WORK/slurm-$PROFILE-$name.ids"
  before=$(wc -l < "$BASE/log/jobcomp.txt" 2>/dev/null || echo 0)
  local t0 t1; t0=$(now)
  sbatch --parsable --chdir=/tmp -o /dev/null --array=0-$((n - 1)) --gres=gpu:1 --wrap=true > "$ids"
  t1=$(now)
  slurm_wait_done "$n"
  sleep 0.5
  $STATS slurm --base "$BASE" --ids "$ids" --t0 "$t0" --t1 "$t1" --name "$name" --ranks 1 \
    --gpus 1 --start batch --profile "$PROFILE" --array | tee -a "$WORK/slurm.jsonl" >&2
}

slurm_run() { # PROFILE
  PROFILE=$1
  export BASE="$WORK/slurm-$PROFILE" SLURM_CONF="$WORK/slurm-$PROFILE/etc/slurm.conf"
  if [ "$PROFILE" = tuned ]; then
    export PROCTRACK=proctrack/linuxproc SCHEDPARAMS=batch_sched_delay=0
  else
    unset PROCTRACK SCHEDPARAMS
  fi
  NNODES=$NODES "$PEER/mkconf.sh" >&2
  CLEAN=1 "$PEER/start.sh" >/dev/null 2>&1
  if [ "$NODE_NICE" -gt 0 ]; then
    # Every slurmd, and the slurmstepd and jobs they fork, as gangway's agents.
    renice -n "$NODE_NICE" -p $(pgrep -x slurmd) >/dev/null
  fi
  trap '"$PEER/stop.sh" >/dev/null 2>&1' EXIT
  local t0; t0=$(now)
  until [ "$(sinfo -h -t idle -o %D 2>/dev/null)" = "$NODES" ]; do
    if [ "$(echo "$(now) - $t0 > 60" | bc)" = 1 ]; then say "Slurm: nodes not idle after 60 s"; sinfo >&2; return 1; fi
    sleep 0.5
  done
  say "Slurm $PROFILE: $NODES nodes idle; warm-up ($WARMUP jobs)"
  if [ "$WARMUP" -gt 0 ]; then
    before=$(wc -l < "$BASE/log/jobcomp.txt" 2>/dev/null || echo 0)
    for _ in $(seq "$WARMUP"); do sbatch -Q --chdir=/tmp -o /dev/null --wrap=true; done
    slurm_wait_done "$WARMUP"
  fi
  say "Slurm $PROFILE: $JOBS one-GPU jobs"
  slurm_phase single "$JOBS" 1 1 batch --gres=gpu:1 --wrap=true
  say "Slurm $PROFILE: $JOBS one-GPU jobs as one array"
  slurm_phase_array array "$JOBS"
  say "Slurm $PROFILE: $GANGS gangs of 2 nodes x 8 GPUs, --wrap=true"
  slurm_phase gang "$GANGS" 2 8 batch -N 2 --gres=gpu:8 --wrap=true
  say "Slurm $PROFILE: $GANGS gangs of 2 nodes x 8 GPUs, --wrap='srun true'"
  slurm_phase gang "$GANGS" 2 8 step -N 2 --gres=gpu:8 --wrap='srun true'
  scancel -u root 2>/dev/null || true
  "$PEER/stop.sh" >/dev/null 2>&1
  trap - EXIT
}

# ---- gangway ----

# ext4 skips inodes freed in the last 60 s (300 s while their inode table
# block is dirty) when it allocates new ones, so what the previous run
# deleted at its end (Slurm's spool and state files, gangway's run
# directory) slows whichever system runs first now by up to a third. Wait,
# after a sync, until the previous run ended 65 s ago.
STAMP=${TMPDIR:-/tmp}/e2e-vs-slurm.last
if [ -f "$STAMP" ]; then
  sync
  left=$(( $(stat -c %Y "$STAMP") + 65 - $(date +%s) ))
  if [ "$left" -gt 0 ]; then say "waiting ${left}s for the previous run's deletions to age (ext4)"; sleep "$left"; fi
fi

if [ "${SKIP_GANGWAY:-0}" != 1 ]; then
  if [ -z "${GANGWAY:-}" ]; then
    GANGWAY="$WORK/gangway"
    say "building gangway"
    (cd "$REPO" && go build -o "$GANGWAY" ./cmd/gangway && go build -o "$(dirname "$GANGWAY")/gangway-shim" ./cmd/gangway-shim)
  fi
  if [ ! -x "$(dirname "$GANGWAY")/gangway-shim" ]; then
    # The agents then run their supervisor through the whole gangway binary.
    say "warning: no gangway-shim beside $GANGWAY; build it there for the figures a release gives"
  fi
  say "gangway: $NODES agents, $JOBS one-GPU jobs, then $GANGS gangs of 2 nodes x 8 GPUs, ranks by $DRIVER"
  # Its data stays until the end: deleting thousands of files now would
  # slow every file Slurm creates next (ext4 skips inodes deleted in the
  # last 60-300 s when it allocates).
  "$GANGWAY" bench e2e -o json --nodes "$NODES" --gpus-per-node 8 --jobs "$JOBS" --gangs "$GANGS" \
    --gang-nodes 2 --warmup "$WARMUP" --array --output "$OUTPUT" --node-nice "$NODE_NICE" --driver "$DRIVER" --dir "$WORK/gangway-run" > "$WORK/gangway.json"
fi

# ---- Slurm ----

if [ "${SKIP_SLURM:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "e2e-vs-slurm: Slurm's emulated nodes need root (or SKIP_SLURM=1)" >&2; exit 1; }
  [ -n "$PEER" ] && [ -x "$PEER/mkconf.sh" ] || { echo "e2e-vs-slurm: set PEER to shared/peers/slurm" >&2; exit 1; }
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge"
    "$PEER/install.sh" >&2
  fi
  : > "$WORK/slurm.jsonl"
  for p in $PROFILES; do slurm_run "$p"; done
fi

echo
if [ -s "$WORK/slurm.jsonl" ] && [ -s "$WORK/gangway.json" ]; then
  $STATS compare --slurm "$WORK/slurm.jsonl" --gangway "$WORK/gangway.json"
fi
echo
rm -rf "$WORK/gangway-run"
touch "$STAMP"
echo "raw results in $WORK (slurm.jsonl, gangway.json, Slurm logs under slurm-*/log)"
