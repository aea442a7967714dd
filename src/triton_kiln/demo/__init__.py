"""kiln's demo: compile real kernels through the pool, two of them bad on purpose."""
