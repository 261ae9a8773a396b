set -o pipefail; export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c 'import torch,sys;print(sys.version, torch.__version__, torch.cuda.device_count())'
time (FLAGOS_ACCELERATOR=cuda MAX_JOBS=16 python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1) || { tail -50 $OUT/build.log; exit 1; }
cat torch_fl/_build_config.py
python3 -m pytest tests/integration/test_cuda_accelerator.py -q -rA -p no:cacheprovider 2>&1 | tee $OUT/cuda_tests.log | tail -60
