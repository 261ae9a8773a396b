"""The NCCL bridge, built into cuda and dcu packages when NCCL's headers are found.

``_flagos_nccl.create_backend(store, rank, size, timeout, ...)`` returns torch's own
``ProcessGroupNCCL`` (RCCL on DCU), constructed from C++, for the flagos c10d backend's NCCL tier
where the installed torch has no ``torch.distributed.ProcessGroupNCCL`` Python class. Import it
through :func:`torch_fl.comm.process_group.nccl_bridge`, which says why it is missing.
"""
