"""Run by every task of an srun step: print this task's plan as one JSON line, after proving that
its own address is really listening and that every other task's address is reachable.

Protocol (no sleeps): listen on my plan port (all interfaces, as a TensorFlow server would),
connect once to every other task's address (polling until it accepts, with a deadline) and send
my rank; keep listening until every other task has connected to me. Then no task closes its
port before all peers have reached it.
"""

import json
import os
import socket
import sys
import time

import tf_for_slurm

DEADLINE_S = 40.0


def main() -> int:
    plan = tf_for_slurm.plan_from_env()
    me = plan.me
    others = [t for t in plan.tasks if t.rank != me.rank]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # as gRPC does (so TIME_WAIT leftovers of an earlier job do not block the port), but
    # still fails loudly if another live task of the step listens on the same port
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind(("0.0.0.0", me.port))
    except OSError as exc:
        print(f"rank {me.rank}: cannot listen on {me.address}: {exc}", file=sys.stderr)
        return 4
    srv.listen(len(plan.tasks))
    srv.settimeout(0.2)
    deadline = time.monotonic() + DEADLINE_S
    reached, heard = set(), set()
    while len(reached) < len(others) or len(heard) < len(others):
        if time.monotonic() > deadline:
            print(f"rank {me.rank}: reached {sorted(reached)} heard {sorted(heard)}", file=sys.stderr)
            return 3
        for t in others:
            if t.rank in reached:
                continue
            try:
                with socket.create_connection((t.host, t.port), timeout=0.5) as c:
                    c.sendall(f"{me.rank}\n".encode())
                reached.add(t.rank)
            except OSError:
                pass
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            continue
        with conn:
            conn.settimeout(5)
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(64)
                if not chunk:
                    break
                data += chunk
            if data.strip():
                heard.add(int(data.strip()))
    srv.close()
    print(json.dumps({
        "procid": int(os.environ["SLURM_PROCID"]),
        "localid": int(os.environ["SLURM_LOCALID"]),
        "slurmd_nodename": os.environ["SLURMD_NODENAME"],
        "port_scope": os.environ.get("TF_SLURM_PORT_SCOPE"), "tmpdir": os.environ.get("TMPDIR"),
        "resv_ports": os.environ.get("SLURM_STEP_RESV_PORTS"),
        "rank": me.rank, "node": me.node, "host": me.host, "port": me.port, "role": me.role,
        "index": me.index, "address": me.address, "local_id": me.local_id,
        "job_type": plan.job_type, "task_index": plan.task_index,
        "cluster": plan.server_dictionary(), "heard": sorted(heard),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
