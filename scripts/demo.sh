#!/usr/bin/env bash
# Demo of warden's policy -> sandbox path: bundle the web-fetch example
# policy for a fresh workspace and run a few commands in it under runc,
# showing what the policy allows and what it stops. Run as root (make demo).
set -euo pipefail
WARDEN=${WARDEN:-bin/warden}
RUNC=${RUNC:-runc}
cd "$(dirname "$0")/.."

work=$(mktemp -d /tmp/warden-demo.XXXXXX)
chmod 755 "$work"
state="$work/runc-state"
id="warden-demo-$$"
root="$work/warden-root"
cleanup() {
	"$RUNC" --root "$state" delete --force "$id" >/dev/null 2>&1 || true
	"$WARDEN" --root "$root" session rm --force demo >/dev/null 2>&1 || true
	pkill -f -- "--root $root daemon" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ws"
echo "hello from the workspace" >"$work/ws/notes.txt"

echo "== warden policy explain policies/web-fetch.toml"
"$WARDEN" policy explain policies/web-fetch.toml --workspace "$work/ws"
echo
# Only curl, jq and sh may run under web-fetch, so the script sticks to
# shell built-ins for everything else.
script='
while read -r k v; do case $k in Uid:|CapEff:|NoNewPrivs:|Seccomp:) echo "$k $v";; esac; done </proc/self/status
read -r line <notes.txt && echo "read workspace: $line"
echo "written by the sandbox" >out.txt && echo "write workspace: ok"
echo "curl (allowed): $(curl -s file:///workspace/notes.txt)"
echo "jq (allowed): $(echo "{\"n\": 42}" | jq .n)"
ls / 2>/dev/null || echo "ls (not in exec.allow): refused"
/usr/bin/python3 -c 1 2>/dev/null || echo "python3 (not in exec.allow): refused"
(echo x >/usr/evil) 2>/dev/null && echo "write /usr: ALLOWED" || echo "write /usr: refused"
(read -r l </etc/shadow) 2>/dev/null && echo "read /etc/shadow: ALLOWED" || echo "read /etc/shadow: refused"
(read -r l </root/.bashrc) 2>/dev/null && echo "host home: VISIBLE" || echo "host /root: invisible"
n=0; while read -r l; do n=$((n+1)); [ $n -gt 2 ] && echo "network interface: ${l%%:*}"; done </proc/net/dev
'
echo "== warden bundle --policy policies/web-fetch.toml --workspace $work/ws --out $work/bundle -- sh -c ..."
"$WARDEN" bundle --policy policies/web-fetch.toml --workspace "$work/ws" --out "$work/bundle" -- sh -c "$script"
echo
echo "== runc run (the sandbox)"
"$RUNC" --root "$state" run --bundle "$work/bundle" "$id" </dev/null
echo
echo "== on the host: $(ls -ln "$work/ws/out.txt" | awk '{print "out.txt owned by uid " $3 " (the workspace owner)"}')"

# warden's main job: a session, one warm sandbox per conversation, and a
# command per tool call through `warden exec` (the daemon starts on demand).
w() { "$WARDEN" --root "$root" "$@"; }
echo
echo "== warden session create --id demo --policy policies/web-fetch.toml --workspace $work/ws"
w session create --id demo --policy policies/web-fetch.toml --workspace "$work/ws"
echo "== warden exec --session demo -- jq -n '{answer: (6*7)}'"
w exec --session demo -- jq -cn '{answer: (6*7)}'
echo "== warden exec --session demo -- sh -c 'read -r l <notes.txt; ...; echo from-the-session >>out.txt'"
w exec --session demo -- sh -c 'read -r l <notes.txt; echo "read: $l"; echo from-the-session >>out.txt'
echo "== warden exec --session demo -- python3 -c 1   (not in exec.allow)"
w exec --session demo -- python3 -c 1 || echo "exit status $?"
echo "== warden exec --session demo -- sh -c '/lib64/ld-linux-x86-64.so.2 /usr/bin/python3 -c 1'   (nor through the loader)"
w exec --session demo -- sh -c '/lib64/ld-linux-x86-64.so.2 /usr/bin/python3 -c 1' 2>&1 || echo "exit status $?"
echo "== warden exec --session demo --timeout 1s -- sh -c 'while :; do :; done'"
w exec --session demo --timeout 1s -- sh -c 'while :; do :; done' || echo "exit status $?"
echo "== 200 x warden exec --session demo -- sh -c true"
start=$(date +%s%N)
for _ in $(seq 200); do w exec --session demo -- sh -c true; done
echo "   $(( ($(date +%s%N) - start) / 200000 )) us per exec, CLI to exit status"
echo "== warden session ls"
w session ls
echo "== warden logs --session demo (last 3)"
w logs --session demo | tail -n 3
echo "== warden session rm demo"
w session rm demo
echo "== on the host: the workspace survives: $(tr '\n' ' ' <"$work/ws/out.txt")"
