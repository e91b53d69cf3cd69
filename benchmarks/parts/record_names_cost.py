"""(CPU) What a record's ``kernels`` cost to make from real torch kernel names, for two checkouts.

    python benchmarks/parts/record_names_cost.py ROOT [ROOT ...]

Each root (a checkout: ``git archive COMMIT | tar -x -C DIR`` makes one) in its own process, its
``pytest_gpuutil`` first on sys.path: ``gates.kernel_families.compact_kernels`` over the four names a small
GPU test of the overhead suites records (a sum's reduce_kernel with its full template, two elementwise
kernels, a device-to-host copy), 5,000 calls, best of 7, in µs a record. The synthetic suite's short names
hide this cost; a GPU suite's names do not.
"""
from __future__ import annotations

import subprocess
import sys

REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
          "unsigned int, float, 4, 4>>(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
          "unsigned int, float, 4, 4>)")
ROWS = ((REDUCE, 1, 2.5),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1>>"
         "(int, at::native::FillFunctor<float>, std::array<char*, 1>)", 1, 1.5),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, std::array<char*, 3>>"
         "(int, at::native::MulFunctor<float>, std::array<char*, 3>)", 1, 1.5),
        ("Memcpy DtoH (Device -> Pageable)", 1, 1.0))

CHILD = '''
import sys, time
sys.path.insert(0, sys.argv[1])
from pytest_gpuutil.gates.kernel_families import compact_kernels
rows = eval(sys.argv[2])
best = float("inf")
for _ in range(7):
    began = time.perf_counter()
    for _ in range(5000):
        compact_kernels(rows)
    best = min(best, (time.perf_counter() - began) / 5000)
print(f"{best * 1e6:.2f}")
'''


def main(argv: list[str] | None = None) -> int:
    roots = (argv if argv is not None else sys.argv[1:]) or ["."]
    for root in roots:
        done = subprocess.run([sys.executable, "-c", CHILD, root, repr(ROWS)], capture_output=True, text=True, check=True)
        print(f"{root}: compact_kernels {done.stdout.strip()} µs a record (4 real kernel names)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
