package pagetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// Who really holds a GPU: the Slurm job a process runs in, and the
// container (and Kubernetes pod) that runs it. gpu01 has alice's Slurm
// job on GPU 1; gpu02 a vLLM server running as root in a named container
// of a pod on GPU 0, and on GPU 1 a container without a name beside root
// outside any container.

const (
	jobGPU      = `.host[data-host="gpu01"] .gpu[data-gpu="1"]`
	vllmGPU     = `.host[data-host="gpu02"] .gpu[data-gpu="0"]`
	unnamedGPU  = `.host[data-host="gpu02"] .gpu[data-gpu="1"]`
	vllmPod     = "6a3f0a43-5b7e-4c1e-9a8d-2f1e0c9b7a11"
	vllmCommand = "python3 -m vllm.entrypoints.openai.api_server"
)

// attribute puts a process row in a Slurm job and a container.
func attribute(r loaddata.Row, job, name, partition, ctr, ctrName, pod string) loaddata.Row {
	r.SlurmJob, r.SlurmJobName, r.SlurmPartition = job, name, partition
	r.Container, r.ContainerName, r.Pod = ctr, ctrName, pod
	return r
}

func attribFleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	return []loaddata.Row{
		gpuRow(ts, "gpu01", 0),
		attribute(withProcess(gpuRow(ts, "gpu01", 1), 4242, "alice", aliceCmd, 30720, 5400), "1233_5", "llama-7b", "gpu", "", "", ""),
		attribute(withProcess(gpuRow(ts, "gpu02", 0), 777, "root", vllmCommand, 70000, 3600), "", "", "", "3f2a9c1e4b7d", "vllm-server", vllmPod),
		attribute(withProcess(gpuRow(ts, "gpu02", 1), 778, "root", "python3 worker.py", 20480, 60), "", "", "", "0f1e2d3c4b5a", "", ""),
		withProcess(gpuRow(ts, "gpu02", 1), 779, "root", "python3 burn.py", 10240, 60),
	}
}

// hostileJobFleet has every hostile text of payloads in a Slurm job's
// name and partition, and in a container's name and pod: mallory's job in
// her container on GPU 2i of gpu03, root's container on GPU 2i+1 (its
// name on the cell).
func hostileJobFleet(at time.Time) []loaddata.Row {
	ts := at.UTC().Format(loaddata.TimeFormat)
	var rows []loaddata.Row
	for i, p := range payloads {
		rows = append(rows,
			attribute(withProcess(gpuRow(ts, "gpu03", int64(2*i)), int64(5000+i), "mallory", "python x.py", 1024, 60),
				fmt.Sprint(9000+i), p, p, "a1b2c3d4e5f6", p, p),
			attribute(withProcess(gpuRow(ts, "gpu03", int64(2*i+1)), int64(6000+i), "root", "python y.py", 1024, 60),
				"", "", "", "0f1e2d3c4b5a", p, ""))
	}
	return rows
}

func TestDetailShowsJobAndContainer(t *testing.T) {
	tb := openFleet(t, tabOptions{}, attribFleet(time.Now()))
	tb.unhover()
	text := func(sel string) string {
		t.Helper()
		return strings.Join(strings.Fields(eval[string](tb, `document.querySelector(`+jsString(sel)+`).innerText`)), " ")
	}

	// Without a hover: root in a container is the container, by name,
	// else by id; root outside one stays root; a Slurm user stays the user.
	for _, tt := range []struct{ sel, want string }{
		{vllmGPU, "vllm-server 68G"},
		{unnamedGPU, "0f1e2d3c4b5a, root 30G"},
		{jobGPU, "alice 30G"},
	} {
		if got := text(tt.sel + " > .u"); got != tt.want {
			t.Errorf("%s says %q without a hover, want %q", tt.sel, got, tt.want)
		}
	}

	// Hovering the Slurm job's GPU: a "job / container" column before
	// the command, with the job's id, name and partition.
	tb.hover(jobGPU)
	tb.waitVisible(jobGPU + aside)
	heads := eval[[]string](tb, `[...document.querySelectorAll(`+jsString(jobGPU+aside+" tr:first-child > td")+`)].map(td => getComputedStyle(td, "::before").content)`)
	if want := `"user" "pid" "memory" "elapsed" "job / container" "command"`; strings.Join(heads, " ") != want {
		t.Errorf("the process table's column headers are %v, want %s", heads, want)
	}
	row := eval[[]string](tb, `[...document.querySelectorAll(`+jsString(jobGPU+aside+" tr:first-child > td")+`)].map(td => td.innerText)`)
	if got, want := strings.Join(row, "|"), "alice|4242|30G|1 h 30 min|1233_5 llama-7b (gpu)|"+aliceCmd; got != want {
		t.Errorf("alice's row is %q, want %q", got, want)
	}
	tb.screenshot("page-job.png", false)
	tb.unhover()
	tb.waitHidden(jobGPU + aside)

	// Tabbing to the container's GPU: root in the user column, the
	// container by name and the pod's uid (its first group) beside it.
	tb.tabTo(vllmGPU, 60)
	tb.waitVisible(vllmGPU + aside)
	if d := text(vllmGPU + aside); !strings.Contains(d, "root") || !strings.Contains(d, "vllm-server · pod 6a3f0a43…") || !strings.Contains(d, vllmCommand) {
		t.Errorf("the vLLM server's detail lacks root, its container and pod, or its command: %q", d)
	}
	eval[bool](tb, `(document.activeElement.blur(), true)`)

	// A GPU whose processes have no job and no container has no such
	// column; the page of a cluster without them pays nothing.
	if n := eval[int](tb, `document.querySelectorAll('.host[data-host="gpu01"] .gpu[data-gpu="0"] td').length`); n != 0 {
		t.Errorf("the free GPU has %d process cells", n)
	}

	// The users table: each user's jobs and containers.
	users := eval[[][]string](tb, `[...document.querySelectorAll("#users tr")].map(r => [...r.cells].map(c => c.innerText))`)
	col := -1
	if len(users) > 0 {
		col = slices.Index(users[0], "jobs / containers")
	}
	if col < 0 {
		t.Fatalf("the users table has no jobs / containers column: %q", users)
	}
	byUser := map[string]string{}
	for _, r := range users[1:] {
		if col < len(r) {
			byUser[r[0]] = r[col]
		}
	}
	if byUser["alice"] != "1233_5" || byUser["root"] != "0f1e2d3c4b5a, vllm-server" {
		t.Errorf("the users table's jobs and containers: %q, want alice's 1233_5 and root's 0f1e2d3c4b5a, vllm-server", byUser)
	}
	tb.noProblems("jobs and containers")
}

// A job's or a container's name is chosen by whoever starts it: on a cell
// and in a detail it is text, and runs nothing.
func TestJobAndContainerNamesRunNothing(t *testing.T) {
	tb := openFleet(t, tabOptions{xssDetector: true}, hostileJobFleet(time.Now()))
	text := func(sel string) string {
		t.Helper()
		return strings.Join(strings.Fields(eval[string](tb, `document.querySelector(`+jsString(sel)+`).innerText`)), " ")
	}
	for i, p := range payloads {
		p = strings.Join(strings.Fields(p), " ")
		mallory := fmt.Sprintf(`.host[data-host="gpu03"] .gpu[data-gpu="%d"]`, 2*i)
		root := fmt.Sprintf(`.host[data-host="gpu03"] .gpu[data-gpu="%d"]`, 2*i+1)
		if got := text(root + " > .u > b"); got != p {
			t.Errorf("root's container %s is named %q on its cell", p, got)
		}
		tb.hover(mallory)
		tb.waitVisible(mallory + aside)
		job := eval[string](tb, `document.querySelector(`+jsString(mallory+aside+" tr:first-child > td:nth-child(5)")+`).textContent`)
		// the partition and the pod are cut shorter than the name
		if !strings.HasPrefix(job, fmt.Sprintf("%d %s (", 9000+i, p)) || !strings.Contains(job, ") · "+p+" · pod ") {
			t.Errorf("mallory's job / container cell is %q, want job %d, then %s as its name and her container's", job, 9000+i, p)
		}
	}
	if hits := eval[[]string](tb, `window.__xss || []`); len(hits) > 0 {
		t.Errorf("a payload ran: %v", hits)
	}
	if n := eval[int](tb, `document.querySelectorAll('img, svg[onload], [onerror], [onmouseover], .gpu b *, .gpu td *:not(em)').length`); n != 0 {
		t.Errorf("%d elements made of the names' markup", n)
	}
	if n := eval[int](tb, `[...document.scripts].filter(s => /alert\(/.test(s.textContent)).length`); n != 0 {
		t.Errorf("%d scripts made of the names", n)
	}
	tb.unhover()
	tb.noProblems("hostile job and container names")
}

// The detail's job and container are markup and style sheet only: they
// show without JavaScript.
func TestJobShownWithoutJavaScript(t *testing.T) {
	tb := openFleet(t, tabOptions{noScript: true}, attribFleet(time.Now()))
	tb.hover(vllmGPU)
	tb.waitVisible(vllmGPU + aside)
	d := eval[string](tb, `document.querySelector(`+jsString(vllmGPU+aside)+`).innerText`)
	if !strings.Contains(d, "vllm-server · pod 6a3f0a43…") {
		t.Errorf("without JavaScript the detail lacks the container and pod: %q", d)
	}
	if h := eval[string](tb, `getComputedStyle(document.querySelector(`+jsString(vllmGPU+aside+" tr:first-child > td:nth-child(5)")+`), "::before").content`); h != `"job / container"` {
		t.Errorf("without JavaScript the job column's header is %s", h)
	}
	tb.noProblems("without JavaScript")
}

// On a phone the users table's jobs column does not make the page scroll
// sideways (the table scrolls in its own box where it must), and a tap
// shows the job / container column in the detail's sheet.
func TestJobsOnAPhone(t *testing.T) {
	tb := openFleet(t, tabOptions{width: 390, height: 844, mobile: true}, attribFleet(time.Now()))
	if sw, iw := eval[int](tb, `document.documentElement.scrollWidth`), eval[int](tb, `innerWidth`); iw != 390 || sw > iw+1 {
		t.Errorf("the page scrolls sideways on a 390 px phone: scrollWidth %d, innerWidth %d", sw, iw)
	}
	if !tb.isVisible("#users") {
		t.Errorf("the users table is hidden on a phone")
	}
	if err := chromedp.Do(tb.ctx, chromedp.Tap(chromedp.CSS(vllmGPU))); err != nil {
		t.Fatalf("tapping the vLLM server's GPU: %v", err)
	}
	tb.waitVisible(vllmGPU + aside)
	if d := eval[string](tb, `document.querySelector(`+jsString(vllmGPU+aside)+`).innerText`); !strings.Contains(d, "vllm-server · pod 6a3f0a43…") {
		t.Errorf("the tapped detail lacks the container and pod: %q", d)
	}
	tb.screenshot("page-phone-job.png", true)
	tb.noProblems("jobs on a phone")
}
