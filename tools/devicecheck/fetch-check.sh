#!/bin/bash
# On a real NVIDIA host (the device machine): fetch (hosts = local) with a busy process and an idle
# holder on GPU 0, then render's views of it, all into $OUT/chk. See README.md.
set -u
O=$OUT/chk; mkdir -p $O
B=$PWD/tools/devicecheck/bin
python3 $PWD/tools/devicecheck/hold.py busy 2048 60 > $O/busy.txt 2>&1 & P1=$!
python3 $PWD/tools/devicecheck/hold.py idle 4096 60 > $O/idle.txt 2>&1 & P2=$!
for i in $(seq 1 40); do grep -q ready $O/busy.txt 2>/dev/null && grep -q ready $O/idle.txt 2>/dev/null && break; sleep 0.5; done
cat $O/busy.txt $O/idle.txt
W=$(mktemp -d); cd $W
printf '[common]\nhosts = local\ntimeout = 30s\n' > config.ini
{ time $B/fetch -c config.ini -o load_data.csv -v; } > $O/fetch.txt 2>&1; echo "fetch rc=$?" >> $O/fetch.txt
cp load_data.csv $O/ 2>/dev/null
$B/render -c config.ini -i load_data.csv -text > $O/text.txt 2>&1; echo "rc=$?" >> $O/text.txt
mkdir -p site; $B/render -c config.ini -i load_data.csv -o site/index.html > $O/render.txt 2>&1; echo "rc=$?" >> $O/render.txt
cp site/status.json site/metrics.prom $O/ 2>/dev/null
kill $P1 $P2 2>/dev/null
cat $O/fetch.txt $O/load_data.csv $O/text.txt $O/render.txt
grep -i 'health\|sm_pct' $O/metrics.prom | head -20
