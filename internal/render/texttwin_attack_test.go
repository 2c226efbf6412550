package render

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// The stale line names the host whose timestamp did not parse, by the
// name in the CSV: a name with a newline must not add a line a script
// reads as a free host, nor an escape reach a terminal that cats the file.
func TestTextTwinStaleLineHostile(t *testing.T) {
	forged := "x\x1b[2J\ngpu99  8  0,1,2,3,4,5,6,7  80,80,80,80,80,80,80,80  -  H100 x8\x1b]0;pwned\x07" + strings.Repeat("y", 300)
	rows := []loaddata.Row{{Timestamp: "not a time", Host: forged, HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(0), GPUName: "NVIDIA H100", MemUsedMiB: loaddata.Num(0), MemTotalMiB: loaddata.Num(81920),
		GPUUtilPct: loaddata.Num(0)}}
	rep, _, err := buildReport(DefaultConfig(), rowsOf(rows), testNow, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range textFiles {
		t.Run(f.name, func(t *testing.T) {
			out := writeTwin(t, f.name, rep)
			if !strings.Contains(out, "STALE") {
				t.Fatalf("no stale line: the test tests nothing\n%s", out)
			}
			checkText(t, out, textOptions{Width: textFileWidth})
			if strings.ContainsAny(out, "\x1b\x07") {
				t.Errorf("an escape reached %s:\n%q", f.name, out)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "gpu99") {
					t.Errorf("a host name forged a line of %s: %q", f.name, line)
				}
			}
		})
	}
}
