#!/usr/bin/env bash
# A single-node SLURM cluster on localhost, for tests (see docs/cluster.md).
#
#   tools/slurm/cluster.sh install                 apt-get Debian's slurmctld slurmd slurm-client munge if absent
#                                                  (apt-get update first only when the lists lack them)
#   tools/slurm/cluster.sh start  [STATE_DIR] [PORT] write slurm.conf, start munged, slurmctld, slurmd; wait for an idle node
#   tools/slurm/cluster.sh stop   [STATE_DIR]        stop the daemons recorded in STATE_DIR/pids (by PID only)
#   tools/slurm/cluster.sh status [STATE_DIR]        which recorded daemons are alive, and sinfo
#
# STATE_DIR defaults to /tmp/empriv-slurm; PORT (slurmctld's; slurmd takes PORT+1) to 6817.
# Everything the cluster writes stays in STATE_DIR, but for munged's socket (in /run/munge): its own
# munge key, spool, logs, job-completion records. Clients find it through STATE_DIR/env.sh
# (SLURM_CONF, and PATH with tools/slurm/bin first, whose `sacct` answers from the controller
# (squeue) and the job-completion file because this cluster runs no accounting daemon).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CMD="${1:-}"
STATE="${2:-/tmp/empriv-slurm}"
PORT="${3:-6817}"
PARTITION="local"
NODE="localhost"
DAEMONS=(munged slurmctld slurmd)
PACKAGES=(slurmctld slurmd slurm-client munge)
# munged insists that every directory above its socket be searchable by all, which a private
# state dir (pytest's tmp dirs are 0700) is not: the socket lives in /run/munge, named per state dir.
MUNGE_SOCKET="/run/munge/empriv-$(printf '%s' "$(realpath -m "$STATE")" | md5sum | cut -c1-12).socket"

die() { echo "cluster.sh: $*" >&2; exit 1; }

have_binaries() {
    local b
    for b in munged mungekey slurmctld slurmd sinfo sbatch scontrol; do
        command -v "$b" >/dev/null 2>&1 || return 1
    done
}

pid_alive() {  # pid_alive NAME -> 0 if STATE/pids/NAME.pid names a live process
    local f="$STATE/pids/$1.pid" pid
    [[ -s "$f" ]] || return 1
    pid="$(cat "$f")"
    kill -0 "$pid" 2>/dev/null
}

cmd_install() {
    if have_binaries; then
        echo "SLURM and munge already installed: $(slurmctld -V)"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "install needs root (apt-get); run as root or install ${PACKAGES[*]} yourself"
    command -v apt-get >/dev/null 2>&1 || die "install needs apt-get (Debian/Ubuntu); install ${PACKAGES[*]} yourself"
    # a fresh container has no package lists: update them only when the install cannot find the packages
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -q \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
        || die "apt-get could not install ${PACKAGES[*]}"
    have_binaries || die "packages ${PACKAGES[*]} installed but a binary is still missing"
    echo "installed: $(slurmctld -V)"
}

write_conf() {
    local cpus mem_mb host
    cpus="$(nproc)"
    # RealMemory in MB, a little under MemTotal so slurmd's own check never sees less than declared
    mem_mb="$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)"
    host="$(hostname -s)"
    cat > "$STATE/slurm.conf" <<EOF
# written by tools/slurm/cluster.sh start: single-node test cluster, no accounting daemon
ClusterName=empriv-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.txt
# finished jobs stay visible to scontrol for MinJobAge seconds; after that only jobcomp.txt has them
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    cat > "$STATE/env.sh" <<EOF
# source this to talk to the test cluster in $STATE
export SLURM_CONF=$STATE/slurm.conf
export PATH=$HERE/bin:\$PATH
EOF
}

start_daemon() {  # start_daemon NAME CMD... : foreground process in its own session, PID recorded
    local name="$1"; shift
    setsid "$@" >"$STATE/log/$name.out" 2>&1 < /dev/null &
    echo $! > "$STATE/pids/$name.pid"
}

wait_for() {  # wait_for DAEMON SECONDS DESCRIPTION TEST... : fails early if DAEMON died
    local daemon="$1" secs="$2" what="$3"; shift 3
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ! pid_alive "$daemon" || (( SECONDS >= deadline )); then
            echo "cluster.sh: $daemon exited or ${secs}s passed while waiting for $what; logs in $STATE/log:" >&2
            tail -n 5 "$STATE"/log/*.log "$STATE"/log/*.out >&2 2>/dev/null || true
            return 1
        fi
        sleep 0.2
    done
}

node_idle() {
    [[ "$(SLURM_CONF="$STATE/slurm.conf" sinfo -h -n "$NODE" -o '%t' 2>/dev/null)" == idle* ]]
}

cmd_start() {
    have_binaries || die "SLURM binaries not found; run: $0 install"
    [[ "$PORT" =~ ^[0-9]+$ ]] && (( PORT > 1024 && PORT < 65535 )) \
        || die "PORT must be an integer in 1025..65534, got '$PORT'"
    local d
    for d in "${DAEMONS[@]}"; do
        pid_alive "$d" && die "$d already running from $STATE (pid $(cat "$STATE/pids/$d.pid")); stop it first"
    done
    mkdir -p "$STATE"/{munge,ctld,spool,run,log,pids}
    chmod 700 "$STATE/munge"
    mkdir -p /run/munge
    chmod 755 /run/munge
    [[ -s "$STATE/munge/munge.key" ]] || mungekey -c -k "$STATE/munge/munge.key"
    chmod 600 "$STATE/munge/munge.key"
    write_conf

    start_daemon munged munged -F \
        --key-file="$STATE/munge/munge.key" --socket="$MUNGE_SOCKET" \
        --pid-file="$STATE/munge/munged.pid" --seed-file="$STATE/munge/munged.seed" \
        --log-file="$STATE/log/munged.log"
    wait_for munged 10 "munged's socket" test -S "$MUNGE_SOCKET"
    wait_for munged 10 "a munge credential" bash -c "munge -n -S '$MUNGE_SOCKET' | unmunge -S '$MUNGE_SOCKET'"

    start_daemon slurmctld slurmctld -D -i -f "$STATE/slurm.conf"
    wait_for slurmctld 30 "slurmctld" env SLURM_CONF="$STATE/slurm.conf" scontrol ping
    start_daemon slurmd slurmd -D -N "$NODE" -f "$STATE/slurm.conf"
    wait_for slurmd 60 "node $NODE idle" node_idle
    echo "cluster up in $STATE (slurmctld port $PORT); for clients: . $STATE/env.sh"
}

cmd_stop() {
    local d pid i
    [[ -d "$STATE/pids" ]] || { echo "no cluster recorded in $STATE"; return 0; }
    # reverse order: slurmd, slurmctld, munged
    for d in slurmd slurmctld munged; do
        pid_alive "$d" || { rm -f "$STATE/pids/$d.pid"; continue; }
        pid="$(cat "$STATE/pids/$d.pid")"
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "$d (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$STATE/pids/$d.pid"
        echo "stopped $d (pid $pid)"
    done
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
}

cmd_status() {
    local d rc=0
    for d in "${DAEMONS[@]}"; do
        if pid_alive "$d"; then
            echo "$d: running (pid $(cat "$STATE/pids/$d.pid"))"
        else
            echo "$d: not running"
            rc=1
        fi
    done
    if (( rc == 0 )); then
        SLURM_CONF="$STATE/slurm.conf" sinfo -N -o '%N %P %t %c %m' || rc=1
    fi
    return $rc
}

case "$CMD" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) die "command must be one of install, start, stop, status; got '${CMD}'" ;;
esac
