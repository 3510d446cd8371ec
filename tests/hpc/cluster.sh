#!/usr/bin/env bash
# A single-node SLURM cluster on localhost, for tests/hpc (needs root, slurm-wlm and munge).
#
#   tests/hpc/cluster.sh start STATE_DIR   # munged + slurmctld + slurmd; prints the partition name
#   tests/hpc/cluster.sh stop STATE_DIR
#
# The node is this machine: its CPU count (or CLUSTER_CPUS) and ~90% of its memory; no GPU, no accounting
# (Snakemake must then be told `--slurm-status-command squeue`). The configuration must be
# at /etc/slurm/slurm.conf: SLURM strips SLURM_CONF inside job steps.
set -euo pipefail
action=${1:?usage: cluster.sh start|stop STATE_DIR}
state=$(realpath -m "${2:?usage: cluster.sh start|stop STATE_DIR}")
partition=cellica_test

stop() {
    for pidfile in "$state/slurmd.pid" "$state/slurmctld.pid"; do
        [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 1
}

start() {
    for bin in munged slurmctld slurmd sbatch; do
        command -v "$bin" >/dev/null || { echo "cluster.sh: $bin not found (apt-get install slurm-wlm munge)" >&2; exit 3; }
    done
    [[ $(id -u) == 0 ]] || { echo "cluster.sh: must run as root to start slurmd" >&2; exit 3; }
    mkdir -p "$state/spool/ctld" "$state/spool/d" /etc/slurm
    # munge: Debian ships a key; the daemon runs as the munge user.
    mkdir -p /run/munge && chown munge:munge /run/munge
    if ! pgrep -x munged >/dev/null; then
        [[ -f /etc/munge/munge.key ]] || { /usr/sbin/mungekey --create 2>/dev/null || create-munge-key -f; }
        runuser -u munge -- /usr/sbin/munged
    fi
    local cpus mem host
    # CLUSTER_CPUS may exceed the real count (config_overrides): lets small test jobs overlap.
    cpus=${CLUSTER_CPUS:-$(nproc)}
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    host=$(hostname -s)
    cat > "$state/slurm.conf" <<CONF
ClusterName=cellica
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/spool/ctld
SlurmdSpoolDir=$state/spool/d
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$partition Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    ln -sf "$state/slurm.conf" /etc/slurm/slurm.conf
    stop
    slurmctld -i
    slurmd
    for _ in $(seq 60); do
        if sinfo -h -o %t 2>/dev/null | grep -qx idle; then
            echo "$partition"
            return 0
        fi
        sleep 0.5
    done
    echo "cluster.sh: the node did not become idle; see $state/slurmctld.log and $state/slurmd.log" >&2
    sinfo >&2 || true
    exit 4
}

case $action in
    start) start ;;
    stop) stop ;;
    *) echo "usage: cluster.sh start|stop STATE_DIR" >&2; exit 2 ;;
esac
