#!/usr/bin/env bash
# A real Slurm 22.05 cluster of N emulated nodes on this one machine, for tests and demos.
#
#   scripts/local_slurm.sh up [--nodes N]   install (if needed) and start munged, slurmctld, N slurmd
#   scripts/local_slurm.sh down             stop exactly the daemons this script started
#   scripts/local_slurm.sh status           daemons and `sinfo`; exit 0 only when all nodes answer
#   scripts/local_slurm.sh env              print the exports: eval "$(scripts/local_slurm.sh env)"
#   scripts/local_slurm.sh controller stop|start   Slurm's rough edges, on purpose: slurmctld stopped, or
#                                           started again keeping its saved state (jobs survive)
#   scripts/local_slurm.sh restart-slurmd nodeK     one node's slurmd stopped and started again (its
#                                           slurmstepd processes and tasks keep running)
#
# Everything lives under one directory: ${TF_SLURM_LOCAL_DIR:-/tmp/tf_for_slurm-slurm}
# (munge key + socket, slurm.conf, per-node spool/tmp, pid and log files).
# Tunables (environment): TF_SLURM_LOCAL_CPUS (CPUs per node, 4), TF_SLURM_LOCAL_MEM (RealMemory
# per node in MB, 4096; DefMemPerCPU = MEM / CPUS), TF_SLURM_LOCAL_PORT (slurmctld port, 16817;
# slurmd ports follow it), TF_SLURM_LOCAL_RESV_PORTS (e.g. 12000-12999: sets MpiParams=ports=..., so
# `srun --resv-ports` works as on sites that configure it; default: unset, as on most sites).
#
# Why the odd bits: all emulated nodes share one real hostname, so (a) every slurmd gets its own
# port, spool dir and TmpFS, (b) a TaskProlog gives each node its own TMPDIR (Open MPI shared
# memory files collide otherwise) and sets TF_SLURM_PORT_SCOPE=step (TensorFlow ports must be
# unique across the whole step, not just per node), and (c) node1..nodeN (and nodeK-ib, for the
# InfiniBand address template) must resolve, so a marked block is added to /etc/hosts when they
# do not; `down` removes it.
set -euo pipefail

DIR="${TF_SLURM_LOCAL_DIR:-/tmp/tf_for_slurm-slurm}"
CPUS="${TF_SLURM_LOCAL_CPUS:-4}"
MEM="${TF_SLURM_LOCAL_MEM:-4096}"
CTLD_PORT="${TF_SLURM_LOCAL_PORT:-16817}"
RESV_PORTS="${TF_SLURM_LOCAL_RESV_PORTS:-}"   # e.g. 12000-12999: MpiParams=ports=... (srun --resv-ports)
HOSTS_BEGIN="# BEGIN tf_for_slurm local_slurm.sh (removed by: local_slurm.sh down)"
HOSTS_END="# END tf_for_slurm local_slurm.sh"
CONF="$DIR/etc/slurm.conf"
UP_DEADLINE_S=60

log() { echo "local_slurm: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    echo "usage: $0 up|down|status|env [--nodes N] | controller stop|start | restart-slurmd nodeK" >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# pid files: a pid counts as ours only if it is alive AND its command line names our state dir
# (pid reuse must never make us kill a stranger).
pid_is_ours() { # pidfile
    local pidfile="$1" pid
    [[ -s "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$DIR/" || return 1
    echo "$pid"
}

stop_pidfiles() { # name=pidfile...: SIGTERM them all at once, then wait (SIGKILL after 15 s)
    local item name pidfile pid deadline pids=()
    for item in "$@"; do
        name="${item%%=*}" pidfile="${item#*=}"
        if pid="$(pid_is_ours "$pidfile")"; then
            log "stopping $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$pidfile"
    done
    deadline=$((SECONDS + 15))
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do
            if ((SECONDS >= deadline)); then
                log "pid $pid ignored SIGTERM for 15 s: SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.05
        done
    done
}

# ---------------------------------------------------------------------------------------------
ensure_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v srun >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    ((${#missing[@]} == 0)) && return 0
    [[ "$(id -u)" == 0 ]] || die "missing ${missing[*]} and not root: install slurmctld slurmd slurm-client munge"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -o DPkg::Lock::Timeout=600 -qq >&2
    apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends \
        slurmctld slurmd slurm-client munge >&2
}

nodes_running() { # prints the node count of the running cluster, if any
    [[ -s "$DIR/run/nodes" ]] && cat "$DIR/run/nodes"
}

write_config() { # nodes
    local n="$1" host defmem first_job
    host="$(hostname)"
    defmem=$((MEM / CPUS))
    # Job ids (and so tf_for_slurm's job-derived port windows) start at a random number for each
    # fresh slurmctld: a restarted cluster does not reuse the last one's ports, nor those of
    # local tests that fake small job ids on this same host.
    first_job="$(cat "$DIR/run/first_job_id" 2>/dev/null || true)"
    if [[ ! "$first_job" =~ ^[0-9]+$ ]] || ! pid_is_ours "$DIR/run/slurmctld.pid" >/dev/null; then
        first_job=$(((RANDOM * 32768 + RANDOM) % 900000 + 100000))
        echo "$first_job" >"$DIR/run/first_job_id"
    fi
    mkdir -p "$DIR/etc" "$DIR/state" "$DIR/log" "$DIR/run"
    for ((k = 1; k <= n; k++)); do mkdir -p "$DIR/spool/node$k" "$DIR/tmp/node$k"; done
    chmod 1777 "$DIR/tmp"
    cat >"$DIR/etc/task_prolog.sh" <<EOF
#!/bin/sh
# Emitted lines "export NAME=VALUE" become the task's environment (Slurm TaskProlog protocol).
node="\${SLURMD_NODENAME:-unknown}"
mkdir -p "$DIR/tmp/\$node" 2>/dev/null
echo "export TMPDIR=$DIR/tmp/\$node"
# keep a scope the user chose (a one-node step may test per-node ports); default: step-wide
[ -n "\${TF_SLURM_PORT_SCOPE:-}" ] || echo "export TF_SLURM_PORT_SCOPE=step"
EOF
    chmod 755 "$DIR/etc/task_prolog.sh"
    cat >"$CONF" <<EOF
# Generated by scripts/local_slurm.sh: $n emulated nodes on host $host
ClusterName=tfslurm
FirstJobId=$first_job
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also the wait before a requeued job may start again (default 120 s; measured 121 s)
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
TmpFS=$DIR/tmp/%n
TaskProlog=$DIR/etc/task_prolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
# a job that became eligible (a requeued one after cred_expire) starts within 5 s, not at the next
# 30-60 s pass (measured: 28 s from requeue to start with the defaults)
SchedulerParameters=sched_interval=5,bf_interval=5
MpiDefault=none
${RESV_PORTS:+MpiParams=ports=$RESV_PORTS}
ReturnToService=2
SlurmdTimeout=300
KillWait=5
MessageTimeout=20
NodeName=node[1-$n] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$((CTLD_PORT + 1))-$((CTLD_PORT + n))] CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$defmem
EOF
}

ensure_hosts() { # nodes
    local n="$1" k names=() missing=0
    for ((k = 1; k <= n; k++)); do names+=("node$k" "node$k-ib"); done
    for name in "${names[@]}"; do getent hosts "$name" >/dev/null || missing=1; done
    ((missing)) || return 0
    [[ -w /etc/hosts ]] || die "node names node1..node$n do not resolve and /etc/hosts is not writable"
    remove_hosts_block
    log "adding node1..node$n (and -ib aliases) to /etc/hosts"
    # Rewrite in place (not rename): /etc/hosts may be a bind mount.
    { printf '%s\n' "$HOSTS_BEGIN" "127.0.0.1 ${names[*]}" "$HOSTS_END"; } >>/etc/hosts
    touch "$DIR/run/hosts-added"
}

remove_hosts_block() {
    grep -qF "$HOSTS_BEGIN" /etc/hosts 2>/dev/null || return 0
    local tmp
    tmp="$(mktemp)"
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0==b{skip=1;next} $0==e{skip=0;next} !skip' /etc/hosts >"$tmp"
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
    rm -f "$DIR/run/hosts-added"
}

start_munge() {
    if pid_is_ours "$DIR/run/munged.pid" >/dev/null; then return 0; fi
    mkdir -p "$DIR/munge"
    if [[ ! -s "$DIR/munge/munge.key" ]]; then
        mungekey --create --keyfile="$DIR/munge/munge.key" >&2
    fi
    chown -R munge:munge "$DIR/munge"
    chmod 0700 "$DIR/munge"
    chmod 0400 "$DIR/munge/munge.key"
    # munged writes its pid file as user munge: give it a file it may write.
    touch "$DIR/run/munged.pid" && chown munge:munge "$DIR/run/munged.pid"
    runuser -u munge -- munged --force \
        --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/munge/munged.log" \
        --seed-file="$DIR/munge/munged.seed" </dev/null >>"$DIR/log/munged.out" 2>&1 9>&-
    local deadline=$((SECONDS + 15))
    until munge -n --socket="$DIR/munge/munge.socket" 2>/dev/null |
        unmunge --socket="$DIR/munge/munge.socket" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "munged did not answer within 15 s (see $DIR/munge/munged.log)"
        sleep 0.1
    done
}

start_slurm() { # nodes
    local n="$1" k
    if ! pid_is_ours "$DIR/run/slurmctld.pid" >/dev/null; then
        # An empty StateSaveLocation: old node states (e.g. INVAL) would otherwise survive.
        rm -rf "$DIR/state" && mkdir -p "$DIR/state"
        slurmctld -f "$CONF" -i </dev/null >>"$DIR/log/slurmctld.out" 2>&1 9>&- ||
            die "slurmctld failed to start (see $DIR/log/slurmctld.log)"
    fi
    for ((k = 1; k <= n; k++)); do
        if ! pid_is_ours "$DIR/run/slurmd-node$k.pid" >/dev/null; then
            slurmd -f "$CONF" -N "node$k" </dev/null >>"$DIR/log/slurmd-node$k.out" 2>&1 9>&- ||
                die "slurmd node$k failed to start (see $DIR/log/slurmd-node$k.log)"
        fi
    done
}

all_idle() { # nodes: true when sinfo reports every node idle (or mixed/allocated: it works)
    local n="$1" states
    states="$(SLURM_CONF="$CONF" sinfo -h -N -o '%N %t' 2>/dev/null)" || return 1
    local count
    count="$(awk '$2 ~ /^(idle|mix|alloc)$/' <<<"$states" | sort -u | wc -l)"
    ((count == n))
}

cmd_up() { # nodes
    local n="$1" running
    ensure_packages
    mkdir -p "$DIR/run" "$DIR/log"
    chmod 755 "$DIR"
    running="$(nodes_running || true)"
    if [[ -n "$running" && "$running" != "$n" ]] && pid_is_ours "$DIR/run/slurmctld.pid" >/dev/null; then
        log "running with $running nodes, $n asked: restarting"
        stop_all
    fi
    write_config "$n"
    echo "$n" >"$DIR/run/nodes"
    ensure_hosts "$n"
    start_munge
    start_slurm "$n"
    local deadline=$((SECONDS + UP_DEADLINE_S))
    until all_idle "$n"; do
        if ((SECONDS >= deadline)); then
            SLURM_CONF="$CONF" sinfo -N >&2 || true
            die "nodes not idle within ${UP_DEADLINE_S} s (logs in $DIR/log)"
        fi
        sleep 0.2
    done
    log "up: $n nodes x $CPUS CPUs, ${MEM} MB each; eval \"\$($0 env)\""
}

cancel_jobs() { # through Slurm itself, so no job step outlives its slurmd
    pid_is_ours "$DIR/run/slurmctld.pid" >/dev/null || return 0
    local jobs deadline
    jobs="$(SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
    [[ -n "${jobs// /}" ]] || return 0
    log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    SLURM_CONF="$CONF" scancel --full $jobs 2>/dev/null || true
    deadline=$((SECONDS + 20))
    while [[ -n "$(SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null)" ]] && ((SECONDS < deadline)); do
        sleep 0.2
    done
}

stop_all() {
    local f daemons=()
    cancel_jobs
    for f in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid"; do
        [[ -e "$f" ]] && daemons+=("$(basename "$f" .pid)=$f")
    done
    ((${#daemons[@]} == 0)) || stop_pidfiles "${daemons[@]}"
    stop_pidfiles "munged=$DIR/run/munged.pid"
}

cmd_down() {
    [[ -d "$DIR" ]] || { log "nothing to stop ($DIR does not exist)"; return 0; }
    stop_all
    # only the cluster that added the /etc/hosts block removes it (another may still use it)
    [[ -e "$DIR/run/hosts-added" ]] && remove_hosts_block
    rm -f "$DIR/run/nodes"
    log "down"
}

cmd_status() {
    local rc=0 f n
    n="$(nodes_running || echo 0)"
    for f in "$DIR/run/munged.pid" "$DIR/run/slurmctld.pid" "$DIR"/run/slurmd-*.pid; do
        [[ -e "$f" ]] || continue
        if pid="$(pid_is_ours "$f")"; then
            echo "$(basename "$f" .pid): running (pid $pid)"
        else
            echo "$(basename "$f" .pid): not running"
            rc=1
        fi
    done
    if [[ "$n" == 0 ]]; then echo "cluster: down"; return 1; fi
    SLURM_CONF="$CONF" sinfo -N || rc=1
    all_idle "$n" || rc=1
    return "$rc"
}

cmd_controller() { # stop|start: the controller alone; `start` keeps StateSaveLocation (cmd_up empties it)
    case "$1" in
    stop) stop_pidfiles "slurmctld=$DIR/run/slurmctld.pid" ;;
    start)
        pid_is_ours "$DIR/run/slurmctld.pid" >/dev/null && return 0
        slurmctld -f "$CONF" </dev/null >>"$DIR/log/slurmctld.out" 2>&1 9>&- ||
            die "slurmctld failed to start (see $DIR/log/slurmctld.log)"
        log "slurmctld started again (saved state kept)" ;;
    *) usage ;;
    esac
}

cmd_restart_slurmd() { # nodeK
    [[ "$1" =~ ^node[1-9][0-9]*$ && -e "$DIR/run/slurmd-$1.pid" ]] || die "restart-slurmd '$1': expected a running node"
    stop_pidfiles "slurmd-$1=$DIR/run/slurmd-$1.pid"
    slurmd -f "$CONF" -N "$1" </dev/null >>"$DIR/log/slurmd-$1.out" 2>&1 9>&- ||
        die "slurmd $1 failed to start (see $DIR/log/slurmd-$1.log)"
    log "slurmd $1 started again"
}

cmd_env() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
    printf 'export TF_SLURM_LOCAL_DIR=%q\n' "$DIR"
}

# ---------------------------------------------------------------------------------------------
[[ $# -ge 1 ]] || usage
action="$1"
shift
case "$action" in
controller | restart-slurmd)
    [[ $# -eq 1 ]] || usage
    if [[ "$action" == controller ]]; then cmd_controller "$1"; else cmd_restart_slurmd "$1"; fi
    exit 0 ;;
esac
nodes=3
while [[ $# -gt 0 ]]; do
    case "$1" in
    --nodes) [[ $# -ge 2 ]] || usage; nodes="$2"; shift 2 ;;
    --nodes=*) nodes="${1#--nodes=}"; shift ;;
    *) usage ;;
    esac
done
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "--nodes='$nodes': expected a positive integer"
[[ "$CPUS" =~ ^[1-9][0-9]*$ ]] || die "TF_SLURM_LOCAL_CPUS='$CPUS': expected a positive integer"
[[ "$MEM" =~ ^[1-9][0-9]*$ ]] || die "TF_SLURM_LOCAL_MEM='$MEM': expected a positive integer (MB)"
[[ -z "$RESV_PORTS" || "$RESV_PORTS" =~ ^[0-9]+-[0-9]+$ ]] ||
    die "TF_SLURM_LOCAL_RESV_PORTS='$RESV_PORTS': expected a port range like 12000-12999"

case "$action" in
up | down)
    # One up/down at a time (tests in parallel sessions may both call up).
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    flock -w 120 9 || die "another local_slurm.sh holds $DIR/.lock"
    if [[ "$action" == up ]]; then cmd_up "$nodes"; else cmd_down; fi
    ;;
status) cmd_status ;;
env) cmd_env ;;
*) usage ;;
esac
