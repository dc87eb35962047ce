#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine (controller + compute daemon), for testing
# `specdec run --executor slurm` without a cluster. Needs root (it installs Debian's
# slurm-wlm + munge when missing and starts the daemons by hand: no systemd needed).
#   scripts/slurm_local.sh start    # install if needed, configure, start, wait until the node is idle
#   scripts/slurm_local.sh stop     # stop the daemons this script started (by their pid files)
#   scripts/slurm_local.sh status   # prints "running" and the node state, or "stopped" (exit 1)
# Idempotent: start on a running cluster only waits for the node; stop on a stopped one does nothing.
# The configuration is one partition `debug` (Default) with this machine's CPUs and memory;
# no accounting database, so per-task exit codes come from `scontrol show job` and the job
# completion log /var/log/slurm/jobcomp.log.
set -euo pipefail

conf_dir=/etc/slurm
run_dir=/run/slurm-local
log_dir=/var/log/slurm
spool=/var/spool/slurm-local
daemons=(slurmd slurmctld munged)  # stop order

die() { echo "slurm_local.sh: $*" >&2; exit 1; }

pid_file() { echo "$run_dir/$1.pid"; }

alive() {  # alive NAME: the daemon of this pid file runs
  local f; f=$(pid_file "$1")
  [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

install_packages() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "slurm-wlm and munge are not installed and installing them needs root"
  command -v apt-get >/dev/null || die "slurm-wlm and munge are not installed and there is no apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends slurm-wlm munge >/dev/null; } ||
    die "apt-get install slurm-wlm munge failed"
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc --all)
  # RealMemory as slurmd measures it (a larger value would leave the node invalid).
  mem=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)
  [ -n "$mem" ] || mem=1000
  local addr=""
  getent hosts "$host" >/dev/null || addr=" NodeAddr=127.0.0.1"
  mkdir -p "$conf_dir"
  cat >"$conf_dir/slurm.conf" <<EOF
# Written by specdec scripts/slurm_local.sh: a single-node cluster for tests.
ClusterName=specdec-local
SlurmctldHost=$host
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$spool/d
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$(pid_file slurmd)
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$log_dir/jobcomp.log
MailProg=/bin/true
ReturnToService=2
MinJobAge=600
SchedulerParameters=defer_batch=0
SlurmdTimeout=60
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN$addr
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

node_state() { sinfo -h -o %t 2>/dev/null | head -1; }

start() {
  install_packages
  mkdir -p "$run_dir" "$log_dir" "$spool/ctld" "$spool/d"
  chown slurm: "$spool/ctld" "$log_dir" 2>/dev/null || true
  if ! alive munged; then
    mkdir -p /run/munge
    chown munge: /run/munge
    [ -f /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || create-munge-key -f >/dev/null; }
    chown munge: /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    runuser -u munge -- munged --force
    # munged writes its pid to /run/munge/munged.pid; keep ours beside the others.
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$(pid_file munged)"
  fi
  if ! alive slurmctld || ! alive slurmd; then
    write_conf
    alive slurmctld || slurmctld
    alive slurmd || slurmd
  fi
  # Wait until the node takes jobs (idle, or already busy with one).
  local st=""
  for _ in $(seq 300); do
    st=$(node_state)
    case "$st" in
      idle|mix|alloc) echo "slurm_local.sh: running; node $(hostname -s) $st"; return 0 ;;
      down*|drain*|inval*) scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.2
  done
  die "the node did not become idle within 60 s (state '${st:-none}'); see $log_dir/slurmctld.log and slurmd.log"
}

stop() {
  for d in "${daemons[@]}"; do
    local f; f=$(pid_file "$d")
    [ -s "$f" ] || continue
    local pid; pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$f"
  done
  echo "slurm_local.sh: stopped"
}

status() {
  if alive slurmctld && alive slurmd && alive munged; then
    echo "running; node $(hostname -s) $(node_state)"
  else
    echo "stopped"
    return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: scripts/slurm_local.sh start|stop|status" ;;
esac
