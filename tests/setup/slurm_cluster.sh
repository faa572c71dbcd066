#!/bin/bash
# A real Slurm cluster on this one machine, for the Slurm tests and
# benchmarks: munged with its own key and socket, slurmctld, and N slurmd
# "nodes" (multiple-slurmd: one port and spool per node), all under DIR
# and on non-default ports, nothing in /etc touched. Run as root.
#
#   slurm_cluster.sh up DIR [NODES]    start (default 3 nodes); prints SLURM_CONF=...
#                                      (with BERTH_SPANK_PLUGIN=SO and
#                                      BERTH_SPANK_BERTH=BIN: berth's plugin too,
#                                      copied in; BERTH_SPANK_IN_PLACE=1: used
#                                      where they are)
#   slurm_cluster.sh down DIR          stop what `up` started, by pid file
#
# Clients (also unprivileged users) need SLURM_CONF=DIR/slurm.conf.
# Steps tracked by process tree (proctrack/linuxproc), task/none; with
# BERTH_SLURM_PROCTRACK=cgroup, by cgroup (v1 freezer here; Slurm kills a
# step's cgroup whole at its end, as on most sites).
set -Eeuo pipefail
CMD=${1:?usage: slurm_cluster.sh up|down DIR [NODES]}
DIR=${2:?usage: slurm_cluster.sh up|down DIR [NODES]}
NODES=${3:-3}
# BERTH_SLURM_PORT moves the ports (the benchmarks' cluster runs beside
# the tests' one).
CTLD_PORT=${BERTH_SLURM_PORT:-16817}
NODE_PORT=$((CTLD_PORT + 1))
log() { echo "slurm_cluster: $*"; }
die() { echo "slurm_cluster: ERROR: $*" >&2; exit 1; }

stop_pidfile() {
    local f=$1 pid i
    [[ -e $f ]] || return 0
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

down() {
    local f
    for f in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
        stop_pidfile "$f"
    done
    log "stopped"
}

up() {
    [[ $(id -u) == 0 ]] || die "run as root"
    for t in slurmctld slurmd munged srun; do
        command -v "$t" > /dev/null || die "$t missing (packages slurm-wlm munge)"
    done
    down > /dev/null 2>&1 || true
    rm -rf "$DIR"
    install -d -m 0755 "$DIR" "$DIR/run" "$DIR/log" "$DIR/ctld" "$DIR/munge" "$DIR/tmp"
    # munged: its own key, socket and pid file; the socket's directories
    # must be world-searchable.
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 0600 "$DIR/munge/munge.key"
    munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/seed" --force
    local host cpus mem nodes="" i
    host=$(hostname)
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / (NODES + 1) ))
    for ((i = 1; i <= NODES; i++)); do
        nodes+="NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((NODE_PORT + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"$'\n'
        install -d -m 0755 "$DIR/spool/n$i" "$DIR/tmp/n$i"
        chmod 1777 "$DIR/tmp/n$i"
    done
    # BERTH_SLURM_PROCTRACK=cgroup: each step in a cgroup of its own (cgroup
    # v1 here), killed whole at the step's end, as most sites run Slurm.
    case ${BERTH_SLURM_PROCTRACK:-linuxproc} in
        linuxproc | cgroup) ;;
        *) die "BERTH_SLURM_PROCTRACK=$BERTH_SLURM_PROCTRACK: use linuxproc or cgroup" ;;
    esac
    if [[ ${BERTH_SLURM_PROCTRACK:-} == cgroup ]]; then
        printf 'CgroupAutomount=yes\nConstrainCores=no\nConstrainRAMSpace=no\n' > "$DIR/cgroup.conf"
    else
        rm -f "$DIR/cgroup.conf"
    fi
    cat > "$DIR/slurm.conf" <<CONF
# written by tests/setup/slurm_cluster.sh
ClusterName=berth-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NODE_PORT
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdSpoolDir=$DIR/spool/%n
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
TmpFS=$DIR/tmp/%n
ProctrackType=proctrack/${BERTH_SLURM_PROCTRACK:-linuxproc}
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
PlugStackConfig=$DIR/plugstack.conf
SlurmctldTimeout=30
SlurmdTimeout=60
MinJobAge=30
KillWait=5
Waittime=0
ReturnToService=2
${nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
    # berth's SPANK plugin when given (BERTH_SPANK_PLUGIN and
    # BERTH_SPANK_BERTH: the .so and the berth it starts), copied in before
    # the daemons start (slurmd loads plugstack.conf once, for the job
    # epilog). "required": a failing option or pull stops the step.
    install -d -m 0755 "$DIR/plugin"
    if [[ -n ${BERTH_SPANK_PLUGIN:-} ]]; then
        so=$DIR/plugin/libberth_spank.so
        bin=$DIR/plugin/berth
        if [[ -n ${BERTH_SPANK_IN_PLACE:-} ]]; then
            # Where a package installed them (tests/package.sh).
            so=$BERTH_SPANK_PLUGIN
            bin=${BERTH_SPANK_BERTH:?BERTH_SPANK_BERTH names the berth binary}
        else
            install -m 0755 "$BERTH_SPANK_PLUGIN" "$so"
            install -m 0755 "${BERTH_SPANK_BERTH:?BERTH_SPANK_BERTH names the berth binary}" "$bin"
        fi
        # BERTH_SPANK_ARGS: more plugstack.conf arguments (container_scope=global).
        echo "required $so berth=$bin batch_modules=slurm${BERTH_SPANK_ARGS:+ $BERTH_SPANK_ARGS}" > "$DIR/plugstack.conf"
        log "berth SPANK plugin installed from $BERTH_SPANK_PLUGIN"
    else
        echo "# no plugins (slurm_cluster.sh up with BERTH_SPANK_PLUGIN adds berth's)" > "$DIR/plugstack.conf"
    fi
    export SLURM_CONF=$DIR/slurm.conf
    slurmctld -f "$SLURM_CONF"
    for ((i = 1; i <= NODES; i++)); do
        slurmd -f "$SLURM_CONF" -N "n$i"
    done
    # Ready when every node is idle.
    for ((i = 0; i < 100; i++)); do
        if [[ $(sinfo -h -o '%T %D' 2>/dev/null | awk '$1 == "idle" {print $2}') == "$NODES" ]]; then
            log "up: $NODES nodes idle; SLURM_CONF=$SLURM_CONF"
            echo "SLURM_CONF=$SLURM_CONF"
            return 0
        fi
        sleep 0.2
    done
    sinfo >&2 || true
    tail -5 "$DIR/log/slurmctld.log" >&2 || true
    die "the nodes did not become idle"
}

case $CMD in
    up) up ;;
    down) down ;;
    *) die "unknown command $CMD (up or down)" ;;
esac
