"""Put by `tf-slurm exec` first on PYTHONPATH when TF_CONFIG is too large for the environment.

Loads the full TF_CONFIG from TF_SLURM_TF_CONFIG_FILE into os.environ at interpreter start, then
hands over to any other sitecustomize further down sys.path.
"""

import os as _os
import sys as _sys

_path = _os.environ.get("TF_SLURM_TF_CONFIG_FILE")
if _path:
    try:
        with open(_path, encoding="utf-8") as _fh:
            _os.environ["TF_CONFIG"] = _fh.read()
    except OSError as _exc:
        _sys.stderr.write(f"tf_for_slurm: cannot read TF_SLURM_TF_CONFIG_FILE={_path!r}: {_exc.strerror}\n")

_here = _os.path.dirname(_os.path.abspath(__file__))
for _entry in _sys.path:
    if _entry and _os.path.abspath(_entry) != _here and _os.path.isfile(_os.path.join(_entry, "sitecustomize.py")):
        _file = _os.path.join(_entry, "sitecustomize.py")
        with open(_file, encoding="utf-8") as _fh:
            exec(compile(_fh.read(), _file, "exec"), {"__name__": "sitecustomize", "__file__": _file})
        break
