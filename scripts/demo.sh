#!/bin/sh
# make demo: start a simulated fleet of GPU hosts (in-process SSH servers on
# 127.0.0.x replaying real nvidia-smi captures), poll it with fetch, and show
# what fetch wrote. Nothing here touches your ~/.ssh.
set -eu
cd "$(dirname "$0")/.."
dir=demo
rm -rf "$dir/fleet"
mkdir -p "$dir/fleet"

bin/simfleet -dir "$dir/fleet" >"$dir/fleet.log" 2>&1 &
fleet=$!
trap 'kill $fleet 2>/dev/null; wait $fleet 2>/dev/null || true' EXIT INT TERM

# simfleet prints the config path once every host listens
i=0
until grep -q 'config.ini' "$dir/fleet.log" 2>/dev/null; do
	if ! kill -0 $fleet 2>/dev/null; then
		echo "demo: error: the simulated fleet did not start:" >&2
		cat "$dir/fleet.log" >&2
		exit 1
	fi
	i=$((i + 1))
	if [ $i -gt 100 ]; then echo "demo: error: the simulated fleet is not up after 10 s" >&2; exit 1; fi
	sleep 0.1
done

echo "== bin/fetch -c $dir/fleet/config.ini -o $dir/load_data.csv -v"
bin/fetch -c "$dir/fleet/config.ini" -o "$dir/load_data.csv" -v
echo
echo "== $dir/load_data.csv (host, status, gpu, name, used/total MiB, user, pid, command)"
# a short view; the file itself has every column
awk -F, 'NR > 1 { printf "%-14s %-12s %-2s %-28s %6s/%-6s %-6s %-7s %s\n", $2, $3, $5, substr($7, 1, 28), $12, $13, $19, $18, substr($20, 1, 40) }' "$dir/load_data.csv" | head -60
echo
echo "Full CSV: $dir/load_data.csv ($(($(wc -l <"$dir/load_data.csv") - 1)) rows). Columns are documented in README.md."
