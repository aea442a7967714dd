"""What the tests share and are not tests themselves: real Triton kernels they compile
(``kernels``, ``farm_kernels``, ``gluon_kernels``, ``globals_pkg``, ``inductor_fixtures``, ...),
compile faults a pool preloads (``faults``, ``helion_faults``, ``inductor_faults_preload``),
stand-ins (a Triton driver: ``jit_support``; host memory: ``host_memory``), the servers, clusters
and headless browser some tests start (``redis_server``, ``lying_servers``, ``ray_cluster``,
``browser``),
child programs some tests run as processes (``node_harness``, ``footprint_child``,
``program_record_child``, ``flaggems_libtuner_drive``), the workloads ``kiln tune`` runs
(``tune_workloads``, ``tune_gpu_workload``), a wheel built and installed (``wheel_build``), a
file or bench script imported by its path (``module_files``), and ``basics``: the sm_90 target,
a compile request, a cubin check, a pool's processes.

``tests/`` is on ``sys.path`` (pyproject's pytest ``pythonpath``; child processes are given it),
so every module here is imported as ``support.NAME``: the name kiln records a kernel under, in
the tests and in the processes they start alike."""
