# Environment for running MORI's multi-process jobs and tests on one machine (source it).
# Open MPI as root, oversubscribed (more ranks than cores), and the OpenSHMEM finalize fix.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_opal_common_ucx_opal_mem_hooks=0
# NVLink multicast stays off on the shared GPU machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
