"""What every ``gpuutil`` subcommand shares: exit codes, and a parser whose errors are one line."""
from __future__ import annotations

import argparse
from typing import Callable, NoReturn, Sequence, TextIO, Union

EXIT_OK = 0
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command line; the message is printed as one ``error:`` line."""


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line raises :class:`UsageError` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_or_exit_code(parse: Callable[[Sequence[str]], argparse.Namespace], words: Sequence[str],
                       err: TextIO) -> Union[argparse.Namespace, int]:
    """The parsed arguments, or the exit status: 2 after one ``error:`` line, that of ``--help``."""
    try:
        return parse(list(words))
    except UsageError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
