"""What ``ckptbench compare`` and ``ckptbench report`` share as commands: their exit codes, and one
``PROG: error: ...`` line on stderr for a bad argument, a file that is not a results document, or
a failure the command names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ckptbench.workload.local.outputs.document import DocumentError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class CommandError(Exception):
    """A failure to report as one error line; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    body: Callable[[argparse.Namespace], int],
) -> int:
    """Parses ``argv`` and runs ``body``; argparse's own usage errors keep argparse's exit code."""
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return body(args)
    except DocumentError as exc:
        error = CommandError(str(exc))
    except CommandError as exc:
        error = exc
    print(f"{parser.prog}: error: {error}", file=sys.stderr)
    return error.code
