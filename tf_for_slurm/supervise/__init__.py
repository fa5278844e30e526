"""Supervision: processes and sockets, no TensorFlow (exec's hub and spokes, the local launcher,
batch-step)."""
