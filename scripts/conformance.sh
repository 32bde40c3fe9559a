#!/usr/bin/env bash
# conformance.sh: run the opencontainers runtime-tools validation programs
# (v0.9.0, the last release on the Go module proxy) against warden and the
# reference runc, in one run, and print pass counts per program and in total.
#
#   WARDEN=bin/warden RUNC=bin/tools/runc bash scripts/conformance.sh [OUT_DIR]
#
# Needs root (real containers). The programs are built in a scratch folder with
# the dependency versions their release pinned (runtime-spec v1.0.2).
set -euo pipefail
WARDEN=$(realpath "${WARDEN:-bin/warden}")
RUNC=$(realpath "${RUNC:-bin/tools/runc}")
OUT=${1:-/tmp/warden-conformance}
export GOFLAGS=-mod=mod PATH=/usr/local/go/bin:$PATH
mkdir -p "$OUT"
src=$(go mod download -json github.com/opencontainers/runtime-tools@v0.9.0 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src"/. "$work"
chmod -R u+w "$work"
cd "$work"
rm -rf Godeps
# The generator's seccomp profile predates syscalls that runc 1.5's init
# uses (statx for its /proc checks, close_range, ...): without them no
# container starts under either runtime. Allow them, for both alike.
sed -i 's/^\(\t*\)"statfs",$/&\n\1"statx",\n\1"openat2",\n\1"close_range",\n\1"faccessat2",\n\1"clone3",\n\1"pidfd_open",\n\1"pidfd_send_signal",\n\1"pidfd_getfd",\n\1"rseq",\n\1"membarrier",\n\1"preadv2",\n\1"pwritev2",\n\1"epoll_pwait2",\n\1"futex_waitv",/' generate/seccomp/seccomp_default.go
grep -q '"close_range"' generate/seccomp/seccomp_default.go
printf 'module github.com/opencontainers/runtime-tools\n\ngo 1.21\n' > go.mod
go mod tidy >/dev/null
go get github.com/opencontainers/runtime-spec@v1.0.2 github.com/opencontainers/selinux@v1.2.2 >/dev/null
CGO_ENABLED=0 go build -o runtimetest ./cmd/runtimetest
tests=()
for d in validation/*/; do
	n=$(basename "$d")
	[ "$n" = util ] && continue
	go build -o "validation/$n.t" "./validation/$n"
	tests+=("$n")
done
printf '%-40s %18s %18s\n' program "warden ok/total" "runc ok/total" | tee "$OUT/summary.txt"
tw=0; tr=0; pw=0; pr=0
for n in "${tests[@]}"; do
	line=$(printf '%-40s' "$n")
	for rt in warden runc; do
		bin=$WARDEN; [ $rt = runc ] && bin=$RUNC
		log="$OUT/$n.$rt.tap"
		RUNTIME=$bin timeout 120 "./validation/$n.t" >"$log" 2>&1 || true
		ok=$(grep -cE '^ok ' "$log" || true)
		total=$(grep -cE '^(ok|not ok) ' "$log" || true)
		# A program that dies before its TAP plan counts as one failure.
		[ "$total" = 0 ] && total=1
		line+=$(printf ' %18s' "$ok/$total")
		if [ $rt = warden ]; then pw=$((pw + ok)); tw=$((tw + total)); else pr=$((pr + ok)); tr=$((tr + total)); fi
	done
	echo "$line" | tee -a "$OUT/summary.txt"
done
printf '%-40s %18s %18s\n' TOTAL "$pw/$tw" "$pr/$tr" | tee -a "$OUT/summary.txt"
