set -u
c=$(git rev-parse --short HEAD)
python3 -m pip install -q --no-deps --no-index --target /tmp/site .carry/mambago-*.whl
export PYTHONPATH=/tmp/site
echo "== gpu.test (all)"; timeout 260 .carry/gpu.test -test.v > $OUT/gpu_test.log 2>&1; echo "exit $?"; grep -E "^(--- FAIL|ok|FAIL|PASS)|panic" $OUT/gpu_test.log | head -20
echo "== kernels RMS"; timeout 60 .carry/kernels.test -test.run 'RMS|GraphNode' 2>&1 | tail -2
echo "== pytest test_gpu"; timeout 150 python3 -m pytest -q tests 2>&1 | tail -2
echo "== memcheck"; timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 .carry/gpu.test -test.run 'TestConformance/fixtures|PrefillGraphCache|DeviceEntry|Pool' > $OUT/memcheck.log 2>&1; echo "exit $?: $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)"
echo "== ab"; AB_ROUNDS=2 AB_SHAPES='130m/B1_T2048|1.4b' timeout 200 bash scripts/device_run.sh $c ab 2>&1 | tail -8
