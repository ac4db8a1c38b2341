# PYTHON_ARGCOMPLETE_OK: argcomplete's global completion looks for this mark (completion.py)
"""The ``ckptbench`` command. Subcommands load lazily: the operator's image carries no torch."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
from collections.abc import Sequence

from ckptbench.workload.contract.names import CHECKPOINTER_LOG_ENV  # pure names, no torch

EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE's, as a shell reports a command killed by it

# subcommand -> (module with a ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "ckptbench.manifest_run",
        "run a benchmark on this machine (N local ranks), from options or a CheckpointBenchmark",
    ),
    "data": (
        "ckptbench.manifest_data",
        "run a data-loading benchmark on this machine (N local ranks reading a dataset), from "
        "options or a DataLoadingBenchmark",
    ),
    "sizes": (
        "ckptbench.workload.local.sizes_cli",
        "print a model's checkpoint sizes per rank and in all (computed, not run)",
    ),
    "compare": (
        "ckptbench.workload.local.outputs.compare",
        "print the cells of two or more results files side by side, with ratios",
    ),
    "report": (
        "ckptbench.workload.local.outputs.plot",
        "draw a results file as PNG, SVG or HTML (needs the 'report' extra)",
    ),
    "worker": (
        "ckptbench.workload.rank.worker",
        "run one rank (the entry point of a benchmark pod)",
    ),
    "data-worker": (
        "ckptbench.workload.rank.data.worker",
        "run one rank of a data-loading benchmark (the entry point of its pod)",
    ),
    "clean": (
        "ckptbench.workload.storage.clean",
        "remove what dead runs left under gs://bucket/prefix or file:///path",
    ),
    "operator": ("ckptbench.operator.runtime.main", "run the Kubernetes operator"),
    "crd": (
        "ckptbench.operator.crd_cli",
        "print the CheckpointBenchmark CRD (--kind sweep, --kind data: the others')",
    ),
    "render": (
        "ckptbench.operator.render_cli",
        "print the manifests for a CheckpointBenchmark or DataLoadingBenchmark",
    ),
}


def _in_a_checkpointer_process() -> None:
    """DCP's process checkpointer is a spawned interpreter that imports this module before it
    configures its logging: when the rank handed a level down, route its lines to the rank's
    log at that level (workload/rank/process/checkpointer_log.py)."""
    # A spawned child is named by multiprocessing before it imports this module (SpawnProcess-N):
    # the variable left in a main process (a shell, the runner, the operator) does nothing.
    child = multiprocessing.current_process().name != "MainProcess"
    if child and __name__ != "__main__" and os.environ.get(CHECKPOINTER_LOG_ENV):
        module = importlib.import_module("ckptbench.workload.rank.process.checkpointer_log")
        module.install_from(os.environ)


_in_a_checkpointer_process()


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: ckptbench COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'ckptbench COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and "_ARGCOMPLETE" in os.environ:
        # A shell asking for completions (argcomplete): answered and exited there.
        importlib.import_module("ckptbench.completion").complete(COMMANDS)
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] == "--version":
        from ckptbench import __version__

        print(__version__)
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"ckptbench: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    try:
        result: int = module.main(rest)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`ckptbench sizes --json | head -1`): what it read is what it
        # wanted. Point stdout at /dev/null so the interpreter's final flush stays quiet, and exit
        # as a command killed by SIGPIPE does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return result


if __name__ == "__main__":
    sys.exit(main())
