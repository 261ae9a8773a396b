message(FATAL_ERROR "FLAGOS_ACCELERATOR=dcu is not implemented in this tree yet")
