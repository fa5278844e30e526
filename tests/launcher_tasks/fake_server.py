"""A stand-in for a TensorFlow task: listen on a port like tf.distribute.Server, then block like
server.join() (or exit with --code after --exit-after seconds).  No TensorFlow needed."""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, default=None)
p.add_argument("--tf-config", action="store_true",
               help="like an unmodified TF_CONFIG script: serve on this task's port from TF_CONFIG; "
                    "--exit-after/--code then apply to workers and chiefs only (a ps joins forever)")
p.add_argument("--fail-worker", type=int, default=None, help="with --tf-config: this worker index exits --code")
p.add_argument("--exit-after", type=float, default=None)
p.add_argument("--code", type=int, default=0)
p.add_argument("--pidfile", default=None)
p.add_argument("--ignore-term", action="store_true")
p.add_argument("--grandchild-pidfile", default=None, help="start a sleeping grandchild, write its pid")
a = p.parse_args()

if a.tf_config:
    import json

    config = json.loads(os.environ["TF_CONFIG"])
    kind, index = config["task"]["type"], config["task"]["index"]
    a.port = int(config["cluster"][kind][index].rpartition(":")[2])
    if kind == "ps":
        a.exit_after = None
    elif a.fail_worker is not None and not (kind == "worker" and index == a.fail_worker):
        a.code = 0
if a.pidfile:
    a.pidfile = a.pidfile.format(rank=os.environ.get("SLURM_PROCID", "x"))
if a.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
server = None
if a.port is not None:
    server = socket.create_server(("", a.port))
    server.listen()
if a.grandchild_pidfile:
    child = subprocess.Popen(["sleep", "1000"])
    with open(a.grandchild_pidfile + ".tmp", "w") as fh:
        fh.write(str(child.pid))
    os.replace(a.grandchild_pidfile + ".tmp", a.grandchild_pidfile)
if a.pidfile:
    with open(a.pidfile + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(a.pidfile + ".tmp", a.pidfile)
print(f"serving on {a.port}", flush=True)
if a.exit_after is not None:
    time.sleep(a.exit_after)
    sys.exit(a.code)
while True:  # server.join(): never returns
    if server is not None:
        server.settimeout(None)
        conn, _ = server.accept()
        conn.close()
    else:
        signal.pause()
