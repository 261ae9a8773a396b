# Sourced by the GPU scripts before they build. The NVIDIA image sets CXX=/opt/gcc/bin/g++, whose
# C++ runtime is not the libstdc++ torch loads: a core built with it crashes formatting error
# messages, and setup.py refuses it (docs/installation/cuda.md). Build with the system GCC.
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
