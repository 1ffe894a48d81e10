T="tests/autodiff/test_autodiff_cudagraphs.py"
for m in timm_mobilenetv3_large_100 timm_vit_base_patch16_224 tv_convnext_tiny tv_mobilenet_v3_large tv_vit_b_16; do
  T="$T tests/capture/test_vision_models.py::test_forward_backward_is_one_graph_equal_to_eager[$m]"
done
T="$T tests/codegen/test_triton_interpret.py::test_interpreter_suite_in_a_child_process tests/runtime/test_channels_last_training.py::test_triton_interpreter_child"
TOTAL=${TOTAL:-470} TEST_S=${TEST_S:-160} TESTS="$T" bash tests/gpu/h200_reduce_overhead_training.sh
if grep -q "test_norms" $OUT/suite/failures.txt 2>/dev/null; then
  PYTHONPATH=/tmp/wick-site timeout 60 python3 bench/results/2026-12-05-1310-h200/diag_ro_norms.py > $OUT/diag.log 2>&1; echo diag rc $?
  grep -v Warning $OUT/diag.log | tail -25
fi
