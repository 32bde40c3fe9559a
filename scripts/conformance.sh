#!/usr/bin/env bash
# conformance.sh: run the opencontainers runtime-tools validation programs
# (v0.9.0, the last release on the Go module proxy) in one run against four
# runtimes, in pairs: warden and its reference runc, then warden's gVisor
# engine (`warden --engine gvisor`) and its reference, plain runsc. It prints
# pass counts per program and in total (OUT_DIR/summary.txt) and keeps each
# program's TAP output (OUT_DIR/PROGRAM.RUNTIME.tap).
#
#   WARDEN=bin/warden RUNC=bin/tools/runc RUNSC=bin/tools/runsc bash scripts/conformance.sh [OUT_DIR]
#
# PROGRAMS="a b" runs only those programs. Needs root (real containers).
# Each runtime keeps its state in a private --root, and containers a program
# leaves behind are deleted at the end. runsc gets the one global flag
# warden gives it for a container without a policy
# (sandbox.RunscSidecarFlag); warden's others (--root, --log, --log-format)
# say only where runsc keeps its state and errors. The programs are built in
# a scratch folder with the dependency versions their release pinned
# (runtime-spec v1.0.2) and the others pinned here.
set -euo pipefail
WARDEN=$(realpath "${WARDEN:-bin/warden}")
RUNC=$(realpath "${RUNC:-bin/tools/runc}")
RUNSC=$(realpath "${RUNSC:-bin/tools/runsc}")
OUT=$(realpath -m "${1:-/tmp/warden-conformance}")
export GOFLAGS=-mod=mod PATH=/usr/local/go/bin:$PATH
mkdir -p "$OUT"
src=$(go mod download -json github.com/opencontainers/runtime-tools@v0.9.0 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
work=$(mktemp -d)
runtimes=(warden runc warden-gvisor runsc)
declare -A cmd=([warden]=$work/warden [runc]=$work/runc [warden-gvisor]=$work/warden-gvisor [runsc]=$work/runsc)
# leftovers deletes the containers a program left under runtime $1: one
# left running would hold the cgroup path the programs share
# (/cgrouptest), and the next runtime's run would find it taken.
leftovers() {
	[ -x "${cmd[$1]}" ] || return 0
	for id in $("${cmd[$1]}" list --quiet 2>/dev/null); do
		echo "conformance: $1: deleting container $id, left behind" >&2
		"${cmd[$1]}" delete --force "$id" >&2 || true
	done
}
cleanup() {
	for rt in "${runtimes[@]}"; do
		leftovers "$rt"
	done
	# runsc keeps an empty network namespace mounted in its root.
	for m in $(awk -v r="$work/roots/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo); do
		umount -l "$m" || true
	done
	if grep -q " $work/" /proc/self/mountinfo; then
		echo "conformance: mounts left under $work; not removing it" >&2
		return
	fi
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/src"
cp -r "$src"/. "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
rm -rf Godeps
# The generator's seccomp profile predates syscalls that runc 1.5's init
# uses (statx for its /proc checks, close_range, ...): without them no
# container starts under either runtime. Allow them, for both alike.
sed -i 's/^\(\t*\)"statfs",$/&\n\1"statx",\n\1"openat2",\n\1"close_range",\n\1"faccessat2",\n\1"clone3",\n\1"pidfd_open",\n\1"pidfd_send_signal",\n\1"pidfd_getfd",\n\1"rseq",\n\1"membarrier",\n\1"preadv2",\n\1"pwritev2",\n\1"epoll_pwait2",\n\1"futex_waitv",/' generate/seccomp/seccomp_default.go
grep -q '"close_range"' generate/seccomp/seccomp_default.go
printf 'module github.com/opencontainers/runtime-tools\n\ngo 1.21\n' > go.mod
go get github.com/opencontainers/runtime-spec@v1.0.2 github.com/opencontainers/selinux@v1.2.2 \
	github.com/sirupsen/logrus@v1.10.2 github.com/urfave/cli@v1.22.17 github.com/mndrix/tap-go@v0.0.0-20171203230836-629fa407e90b \
	github.com/syndtr/gocapability@v0.0.0-20200815063812-42c35b437635 golang.org/x/sys@v0.50.0 \
	github.com/hashicorp/go-multierror@v1.1.1 github.com/blang/semver@v3.5.1+incompatible github.com/xeipuuv/gojsonschema@v1.2.0 \
	github.com/mrunalp/fileutils@v0.5.1 github.com/satori/go.uuid@v1.2.0 github.com/stretchr/testify@v1.12.1 2>/dev/null
go mod tidy 2>/dev/null
CGO_ENABLED=0 go build -o runtimetest ./cmd/runtimetest
if [ -n "${PROGRAMS:-}" ]; then
	read -ra tests <<<"$PROGRAMS"
else
	tests=()
	for d in validation/*/; do
		n=$(basename "$d")
		[ "$n" = util ] || tests+=("$n")
	done
fi
mkdir bin
go build -o bin/ "${tests[@]/#/./validation/}"
# The programs take the runtime as one command (RUNTIME), without global
# flags: small wrappers give each its root and the gVisor pair its flags.
mkdir "$work/roots"
for rt in "${runtimes[@]}"; do
	case $rt in
	warden) line="exec $WARDEN" ;;
	runc) line="exec $RUNC" ;;
	warden-gvisor) line="WARDEN_RUNSC=$RUNSC exec $WARDEN --engine gvisor" ;;
	runsc) line="exec $RUNSC --sidecar-usage-policy=LEGACY_DEPRECATED_SLOW_EMBEDDED_FALLBACK" ;;
	esac
	printf '#!/bin/sh\n%s --root %s "$@"\n' "$line" "$work/roots/$rt" >"${cmd[$rt]}"
	chmod +x "${cmd[$rt]}"
done
# cgroups lists the top-level cgroups named like the programs' container
# ids (UUIDs), sorted.
cgroups() {
	ls /sys/fs/cgroup/pids /sys/fs/cgroup/unified 2>/dev/null | grep -E '^[0-9a-f]{8}-[0-9a-f]{4}-' | sort -u || true
}
# bundle_mounts lists the programs' bundles (TMPDIR/ocitestN) mounted on
# the host: a runtime that honours a shared rootfsPropagation (runc)
# propagates the container's root and its mounts back, and the program
# cannot remove its bundle then.
tmp=${TMPDIR:-/tmp}
bundle_mounts() {
	awk -v p="${tmp%/}/ocitest" 'index($5, p) == 1 && substr($5, length(p) + 1) ~ /^[0-9]+$/ { print $5 }' /proc/self/mountinfo | sort -u
}
declare -A ok_sum total_sum
line=$(printf '%-40s' program)
for rt in "${runtimes[@]}"; do
	line+=$(printf ' %18s' "$rt ok/total")
	ok_sum[$rt]=0 total_sum[$rt]=0
done
echo "$line" | tee "$OUT/summary.txt"
for n in "${tests[@]}"; do
	line=$(printf '%-40s' "$n")
	for rt in "${runtimes[@]}"; do
		log="$OUT/$n.$rt.tap"
		before=$(cgroups)
		mounted=$(bundle_mounts)
		RUNTIME=${cmd[$rt]} timeout 120 "bin/$n" >"$log" 2>&1 || true
		leftovers "$rt"
		for m in $(comm -13 <(echo "$mounted") <(bundle_mounts)); do
			echo "conformance: $n under $rt left its bundle $m mounted on the host; unmounting and removing it" >&2
			umount -R "$m" 2>/dev/null || umount -R -l "$m" || true
			rm -rf --one-file-system "$m"
		done
		# The cgroup folders (named by container id) a runtime left behind
		# for a deleted container are removed when empty.
		for c in $(comm -13 <(echo "$before") <(cgroups)); do
			echo "conformance: $n under $rt left cgroup /$c behind; removing it" >&2
			rmdir /sys/fs/cgroup/*/"$c" 2>/dev/null || true
		done
		ok=$(grep -cE '^ok ' "$log" || true)
		total=$(grep -cE '^(ok|not ok) ' "$log" || true)
		# A program that dies before its TAP plan counts as one failure.
		[ "$total" = 0 ] && total=1
		line+=$(printf ' %18s' "$ok/$total")
		ok_sum[$rt]=$((ok_sum[$rt] + ok)) total_sum[$rt]=$((total_sum[$rt] + total))
	done
	echo "$line" | tee -a "$OUT/summary.txt"
done
line=$(printf '%-40s' TOTAL)
for rt in "${runtimes[@]}"; do
	line+=$(printf ' %18s' "${ok_sum[$rt]}/${total_sum[$rt]}")
done
echo "$line" | tee -a "$OUT/summary.txt"
