"""The rootdir pytest would have chosen had it known this plugin's options.

pytest chooses its rootdir from the command line's test paths before plugins load, so the value of
``--gpu-util-dir PATH`` written as two words counts as a test path there: with PATH outside the
project the rootdir moves up and every node id gains a leading folder (a baseline then matches no
test). Once the options are known (``pytest_load_initial_conftests``) the choice is made again from
the real test paths; where that gives another rootdir with the same ini file (and no ``--rootdir``
or ``-c`` was given), pytest's is replaced, before anything has used it. Everything here reads
pytest's own choice (``_pytest.config.findpaths.determine_setup``); where pytest's internals differ,
nothing is changed (the gate still matches ids moved by a leading path: gates/matching.py).
"""
from __future__ import annotations

import inspect
from typing import Any, Optional, Sequence

from pytest_gpuutil.options import OPTIONS


def _valued_words(args: Sequence[str]) -> set[str]:
    """The words that are the values of this plugin's value options written as two words."""
    flags = {spec.flag for spec in OPTIONS if spec.kind in ("value", "append")}
    words = set()
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg in flags and index + 1 < len(args):
            words.add(args[index + 1])
    return words


def corrected_rootdir(early_config: Any, args: Sequence[str]) -> Optional[str]:
    """Set pytest's rootdir to the one its test paths give without this plugin's option values; the
    old rootdir when it was changed, else None."""
    if not _valued_words(args):
        return None
    try:
        from _pytest.config.findpaths import determine_setup

        known = early_config.known_args_namespace
        if known.inifilename or getattr(known, "rootdir", None):
            return None
        before = early_config._rootpath
        # its parameters moved across pytest 7.4-9: pass those this pytest names
        params = inspect.signature(determine_setup).parameters
        given = {"inifile": None, "args": list(known.file_or_dir or ()), "rootdir_cmd_arg": None,
                 "override_ini": known.override_ini, "invocation_dir": early_config.invocation_params.dir,
                 "config": early_config}
        found = determine_setup(**{k: v for k, v in given.items() if k in params})
        rootpath, inipath = found[0], found[1]
        if rootpath == before or inipath != early_config._inipath:
            return None
        early_config._rootpath = rootpath
        early_config._parser.extra_info["rootdir"] = str(rootpath)
        if inipath is None and str(known.confcutdir) == str(before):
            known.confcutdir = str(rootpath)
        return str(before)
    except Exception:  # noqa: BLE001 - another pytest: its own choice stands
        return None
