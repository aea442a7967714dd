"""A small package of kernels whose signatures and bodies name the package's globals, as real
libraries write them (FLA, quantization kernels): constexpr defaults from another module,
aliases, ``tl.constexpr`` globals, ``@jit`` helpers of another module, aliases of
``triton.language``. Used by ``tests/test_globals.py``."""
