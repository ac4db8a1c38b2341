"""Shell completion of ``ckptbench`` (argcomplete, the ``completion`` extra).

The command dispatches to its subcommands by hand and imports each lazily, so there is no one
argparse parser for argcomplete to read. When a shell asks for completions (argcomplete sets
``_ARGCOMPLETE``), this builds one: a subparser per command, carrying the options of the commands
whose parser is cheap to build (no torch, no Kubernetes client); the others complete by name.
Their options come from the same parsers ``--help`` prints, so a new setting completes as soon
as it is declared. docs/local-runs.md says how to turn it on.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping

# command -> (module, function) building its argparse parser, imported only when completing.
PARSERS: Mapping[str, tuple[str, str]] = {
    "run": ("ckptbench.workload.local.options", "build_parser"),
    "sizes": ("ckptbench.workload.local.sizes_cli", "build_parser"),
    "compare": ("ckptbench.workload.local.outputs.compare", "build_parser"),
    "report": ("ckptbench.workload.local.outputs.plot", "build_parser"),
}


def parser(commands: Mapping[str, tuple[str, str]]) -> argparse.ArgumentParser:
    """The whole command line as one parser: ``commands`` maps each command to (module, help)."""
    top = argparse.ArgumentParser(prog="ckptbench")
    sub = top.add_subparsers(dest="command")
    for name, (_, help_) in commands.items():
        parents = []
        if name in PARSERS:
            module, function = PARSERS[name]
            build: Callable[[], argparse.ArgumentParser] = getattr(
                importlib.import_module(module), function
            )
            parents.append(build())
        sub.add_parser(name, help=help_, parents=parents, add_help=not parents)
    return top


def complete(commands: Mapping[str, tuple[str, str]]) -> None:
    """Print the completions the shell asked for and exit (argcomplete's own way); without the
    ``completion`` extra, exit without any, as a command with nothing to offer."""
    try:
        import argcomplete
    except ImportError:
        raise SystemExit(0) from None
    argcomplete.autocomplete(parser(commands))
