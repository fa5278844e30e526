"""The host: the only layer that reads os.environ, resolves names, asks interfaces, opens probe
sockets and handles signals.  It turns what it reads into plain values for `plan`."""
