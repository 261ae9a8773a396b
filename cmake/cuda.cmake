# The cuda accelerator: flagos memory is CUDA memory from torch's caching allocator.
message(FATAL_ERROR "FLAGOS_ACCELERATOR=cuda is not implemented in this tree yet")
