#!/usr/bin/env bash
# A one-node Slurm cluster on 127.0.0.1 for the Slurm tests (test/cli/slurm.test.js), run by hand
# without systemd: munged, slurmctld -D and slurmd -D, every file in one folder of its own.
#
#   scripts/slurm-cluster.sh install        Debian's slurmctld, slurmd, slurm-client and munge
#   scripts/slurm-cluster.sh start DIR      writes DIR/etc/{slurm.conf,gres.conf}, starts the
#                                           daemons, waits until the node is idle; prints the
#                                           variables a client needs (SLURM_CONF=...)
#   scripts/slurm-cluster.sh stop DIR       stops what start started (by the pids it recorded)
#
# The node: two stand-in GPUs (character devices made with mknod, as slurmd accepts no plain file
# as a GPU's File=), GPU 0 cut into 8 shards, GPU 1 counted as 8 GiB of `gpumem`: one scheme per
# GPU, as docs/slurm.md asks of an admin. The hooks are `cuda-memory slurm task-prolog` and
# `cuda-memory slurm epilog` through DIR/etc/task-prolog.sh and DIR/etc/epilog.sh, which
# start writes from CUDA_MEMORY_SLURM_CLI (the cuda-memory command, its words shell-quoted, by
# full paths), CUDA_MEMORY_SLURM_HOOK_ARGS (options of the task prolog, e.g. --gpu-memory 8GiB for
# stand-in GPUs) and CUDA_MEMORY_SLURM_HOOK_ENV (NAME=value words both hooks run with).
# Ports: SLURM_TEST_PORT (slurmctld) and the one after it (slurmd), default 16817.
# SLURM_TEST_JOB_UID: a uid (and gid of the same number) that jobs will also run as; start gives
# it a passwd and a group entry where it has none, and stop removes only the entries start made.
set -euo pipefail

die() {
  echo "slurm-cluster: $*" >&2
  exit 1
}

install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null && command -v munged >/dev/null; then
    return 0
  fi
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

# slurmd starts a job only for a user it can look up (getpwuid, for the job's name, home and
# groups), and a fresh machine has no user of the second uid the tests submit jobs as: an entry is
# made where there is none (useradd, groupadd), and DIR/run/made-user and made-group record it,
# so that stop removes what start made and nothing a machine had before.
JOB_USER=cuda-memory-job
make_job_user() {
  local dir=$1 uid=$2
  case "$uid" in '' | *[!0-9]*) die "SLURM_TEST_JOB_UID is '$uid', not a uid" ;; esac
  if ! getent group "$uid" >/dev/null; then
    groupadd -g "$uid" "$JOB_USER"
    echo "$JOB_USER" >"$dir/run/made-group"
  fi
  if ! getent passwd "$uid" >/dev/null; then
    useradd -u "$uid" -g "$uid" -M -N -d /nonexistent -s /usr/sbin/nologin "$JOB_USER"
    echo "$JOB_USER" >"$dir/run/made-user"
  fi
}

remove_job_user() {
  local dir=$1
  # -f: a job's process still alive would make userdel refuse, and the entry would outlive the
  # cluster (the next start would take it for the machine's own). Forgotten only once removed.
  if [ -f "$dir/run/made-user" ] && userdel -f "$(cat "$dir/run/made-user")" 2>/dev/null; then
    rm -f "$dir/run/made-user"
  fi
  if [ -f "$dir/run/made-group" ]; then
    # userdel removes a group of the user's name itself, where the login.defs say so.
    if ! getent group "$(cat "$dir/run/made-group")" >/dev/null || groupdel "$(cat "$dir/run/made-group")"; then
      rm -f "$dir/run/made-group"
    fi
  fi
}

# The pids start recorded, newest first; each is stopped only while it is still the daemon it was.
stop_cluster() {
  local dir=$1 name pid i
  for name in slurmd slurmctld munged; do
    [ -f "$dir/run/$name.pid" ] || continue
    pid=$(cat "$dir/run/$name.pid")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q "$name" "/proc/$pid/comm" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/run/$name.pid"
  done
  remove_job_user "$dir"
}

start_cluster() {
  local dir=$1
  local port=${SLURM_TEST_PORT:-16817}
  local cli=${CUDA_MEMORY_SLURM_CLI:?CUDA_MEMORY_SLURM_CLI names the cuda-memory command the hooks run}
  local args=${CUDA_MEMORY_SLURM_HOOK_ARGS:-}
  local henv=${CUDA_MEMORY_SLURM_HOOK_ENV:-}
  command -v slurmctld >/dev/null || die "slurmctld is not installed (scripts/slurm-cluster.sh install)"
  mkdir -p "$dir"/{etc,run,log,spool/ctld,spool/d,munge,dev}
  # The munge socket's folder must be searchable by the job's user; its key only root's.
  chmod 0755 "$dir" "$dir/munge" "$dir/run" "$dir/etc" "$dir/dev"
  chmod 0700 "$dir/log"
  [ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none; }
  chmod 0400 "$dir/munge/munge.key"
  for i in 0 1; do [ -c "$dir/dev/gpu$i" ] || mknod "$dir/dev/gpu$i" c 1 3; done
  [ -z "${SLURM_TEST_JOB_UID:-}" ] || make_job_user "$dir" "$SLURM_TEST_JOB_UID"
  chmod 0666 "$dir"/dev/gpu*
  cat >"$dir/etc/slurm.conf" <<EOF
ClusterName=cmtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.daemon.pid
SlurmdPidFile=$dir/run/slurmd.daemon.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
# The stand-in node's CPUs as declared, not as found: jobs then wait for GPU memory, not cores.
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
InactiveLimit=0
KillWait=2
MinJobAge=2
MessageTimeout=10
GresTypes=gpu,shard,gpumem
TaskProlog=$dir/etc/task-prolog.sh
Epilog=$dir/etc/epilog.sh
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 Gres=gpu:2,shard:8,gpumem:8G State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  cat >"$dir/etc/gres.conf" <<EOF
NodeName=localhost Name=gpu File=$dir/dev/gpu0
NodeName=localhost Name=gpu File=$dir/dev/gpu1
NodeName=localhost Name=shard Count=8 File=$dir/dev/gpu0
NodeName=localhost Name=gpumem Count=8G
EOF
  # Slurm runs the Epilog with an environment of its own making, without PATH: every command by
  # its full path, and the variables the hooks need (CUDA_MEMORY_SHM_DIR) set here.
  cat >"$dir/etc/task-prolog.sh" <<EOF
#!/bin/sh
exec /usr/bin/env $henv $cli slurm task-prolog $args
EOF
  cat >"$dir/etc/epilog.sh" <<EOF
#!/bin/sh
exec /usr/bin/env $henv $cli slurm epilog
EOF
  chmod 0755 "$dir/etc/task-prolog.sh" "$dir/etc/epilog.sh"
  chmod 0644 "$dir/etc/slurm.conf" "$dir/etc/gres.conf"
  export SLURM_CONF=$dir/etc/slurm.conf

  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
  slurmctld -D -i -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/run/slurmctld.pid"
  slurmd -D -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 &
  echo $! >"$dir/run/slurmd.pid"
  local i state=
  for i in $(seq 1 300); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null || true)
    case "$state" in idle* | inval* | drain*) break ;; esac
    sleep 0.2
  done
  case "$state" in
  idle*) ;;
  *)
    tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 || true
    stop_cluster "$dir"
    die "the node did not come up (state '${state}')"
    ;;
  esac
  echo "SLURM_CONF=$SLURM_CONF"
}

case "${1:-}" in
install) install_packages ;;
start) start_cluster "${2:?start DIR}" ;;
stop) stop_cluster "${2:?stop DIR}" ;;
*) die "usage: $0 install | start DIR | stop DIR" ;;
esac
