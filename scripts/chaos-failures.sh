#!/usr/bin/env bash
# chaos-failures.sh LOG: the lines of the failed chaos rounds in a
# `go test -v` log of TestChaos, each round's from its `=== RUN` on, with
# the seed that replays the run. `go test -v` prints a round's verdict
# only when the whole test ends, far below the round's own lines, and CI
# keeps only the tail of the output: make chaos prints this last.
# A run that died (a timeout, a panic) has no verdicts: then the round
# under way when it died is shown.
set -euo pipefail
log=${1:?usage: chaos-failures.sh LOG}

failed=$(grep -oE -- '--- FAIL: TestChaos/[^ ]+' "$log" | sed 's|.*TestChaos/||' || true)
if [ -z "$failed" ]; then
	failed=$(grep -oE '^=== RUN +TestChaos/[^ ]+' "$log" | tail -n 1 | sed 's|.*TestChaos/||' || true)
	if [ -z "$failed" ]; then
		echo "chaos: no round ran (see the test's own lines above)"
		exit 0
	fi
	echo "chaos: no round has a verdict (the run died); the last round started:"
fi
grep -E 'chaos_test.go:[0-9]+: seed ' "$log" || true
# A section runs from `=== RUN|NAME|CONT   TestChaos/ROUND` to the next
# such header, the verdicts (a line starting with ---, PASS, FAIL, ok)
# or a panic.
awk -v failed="$failed" '
	BEGIN { n = split(failed, list, "\n"); for (i = 1; i <= n; i++) want[list[i]] = 1 }
	/^=== (RUN|NAME|CONT|PAUSE) / {
		cur = $3; if (sub(/^TestChaos\//, "", cur) == 0) cur = ""
		if ((cur in want) && $2 == "RUN") print ""
	}
	/^(--- |PASS|FAIL|ok |panic: )/ { cur = "" }
	cur != "" && (cur in want) { print }
' "$log"
if [ -n "$failed" ]; then
	echo "chaos: failed: $(echo $failed)"
fi
