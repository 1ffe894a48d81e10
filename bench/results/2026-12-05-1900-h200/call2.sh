#!/bin/bash
# Call 2 of 2026-12-05 19:00 (H200), at 57a83bb: the whole suite, slow tests first. carry [".whl"].
SUITE_S=520 OUT=$OUT/suite bash tests/gpu/h200_suite.sh
