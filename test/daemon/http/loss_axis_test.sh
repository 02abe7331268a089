#!/usr/bin/env bash
# The status page's logarithmic loss axis under Node (loss_axis_test.js); Node comes with
# tools/setup.sh (npm installs the page's uPlot).
set -euo pipefail
command -v node >/dev/null || { echo "FAIL: node is missing (tools/setup.sh installs nodejs)" >&2; exit 1; }
exec node test/daemon/http/loss_axis_test.js daemon/http/web/graph.js
