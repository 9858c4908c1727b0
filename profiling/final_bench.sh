# The session's final tables (GPU machine): OUT=$OUT TAG=final5 bash profiling/final_bench.sh
# dense M = 1..16 (all k, all dense shapes), MoE expert matmuls (k = 4), MoE layer step.
export PYTHONPATH=.
TAG=${TAG:-final}
python3 profiling/bench.py --M 1,2,4,8,16 --out $OUT --tag $TAG --plot > /tmp/bench_dense.log 2>&1; tail -4 /tmp/bench_dense.log
python3 profiling/bench.py --shapes moe --k 4 --moe-M 1,2,4,8,16,32,64 --out $OUT --tag moe-$TAG > /tmp/bench_moe.log 2>&1; tail -4 /tmp/bench_moe.log
python3 profiling/bench.py --shapes none --moe-layer --k 4 --out $OUT --tag moe-layer-$TAG > /tmp/bench_layer.log 2>&1; tail -4 /tmp/bench_layer.log
