"""A stand-in for torch in the plugin's CPU tests of child processes (see tests/children/conftest.py).

It loads the library named in FAKE_CUPTI globally, as torch loads libcupti; ``cuda.work`` runs
"kernels" through that library's ``fake_work`` (a library without it makes work a no-op).
"""
import ctypes
import os

_fake = ctypes.CDLL(os.environ["FAKE_CUPTI"], mode=ctypes.RTLD_GLOBAL)
try:
    _work = _fake.fake_work
    _work.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
except AttributeError:
    _work = None


class _C:
    @staticmethod
    def _demangle(name):
        return name[len("_Z"):] if name.startswith("_Z") else name


from torch import autograd, cuda  # noqa: E402,F401
