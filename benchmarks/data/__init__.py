"""The big traces the speed benchmarks read, and the two scripts that make them (see ../README.md)."""
