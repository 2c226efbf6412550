// Package captures holds nvidia-smi, amd-smi and rocm-smi output recorded on
// real GPUs, embedded so that the parsers' tests, the simulated fleet and the
// demo all replay exactly what the tools printed. See README.md for where each
// file comes from.
package captures

import (
	"bufio"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed nvidia-smi/*.txt
var files embed.FS

// A Section is one command's output inside a capture.
type Section struct {
	State   string // "capabilities", "idle", "load"; "" in the old single-state file
	Name    string // e.g. "query-gpu (csv, what the exporter parses)"
	Command string // the command line after "# $ "
	Body    string // the raw output, trailing blank lines removed
}

// A Capture is one file: a GPU model and driver, seen idle and under load.
type Capture struct {
	Name     string // file name without .txt
	Sections []Section
}

// Names lists the embedded captures, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, "nvidia-smi")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".txt"))
	}
	sort.Strings(names)
	return names
}

// Load reads and splits one capture.
func Load(name string) (*Capture, error) {
	data, err := files.ReadFile(path.Join("nvidia-smi", name+".txt"))
	if err != nil {
		return nil, fmt.Errorf("captures: %w", err)
	}
	c := &Capture{Name: name}
	if strings.HasPrefix(string(data), "####") {
		c.Sections = splitFramed(string(data))
	} else {
		c.Sections = splitOld(string(data))
	}
	return c, nil
}

// MustLoad is Load for captures known to be embedded.
func MustLoad(name string) *Capture {
	c, err := Load(name)
	if err != nil {
		panic(err)
	}
	return c
}

// Section returns the first section of the given state whose name starts with
// prefix ("query-gpu", "query-compute-apps", "nvidia-smi (default table)").
// In the old single-state file every section matches any state.
func (c *Capture) Section(state, prefix string) (Section, bool) {
	for _, s := range c.Sections {
		if (s.State == state || s.State == "") && strings.HasPrefix(s.Name, prefix) {
			return s, true
		}
	}
	return Section{}, false
}

// splitFramed reads the multi-section format: a line of '#', "# STATE :: NAME",
// "# $ COMMAND", a line of '#', then the raw output.
func splitFramed(data string) []Section {
	lines := strings.Split(data, "\n")
	var out []Section
	for i := 0; i < len(lines); i++ {
		if !isRule(lines[i]) || i+3 >= len(lines) {
			continue
		}
		title, cmd, rule := lines[i+1], lines[i+2], lines[i+3]
		state, name, ok := strings.Cut(strings.TrimPrefix(title, "# "), " :: ")
		if !strings.HasPrefix(title, "# ") || !ok || !strings.HasPrefix(cmd, "# $ ") || !isRule(rule) {
			continue
		}
		j := i + 4
		for j < len(lines) && !(isRule(lines[j]) && j+1 < len(lines) && strings.Contains(lines[j+1], " :: ")) {
			j++
		}
		out = append(out, Section{
			State:   state,
			Name:    name,
			Command: strings.TrimPrefix(cmd, "# $ "),
			Body:    trimBody(lines[i+4 : j]),
		})
		i = j - 1
	}
	return out
}

// splitOld reads the older sample format: "# nvidia-smi ARGS" then the output.
func splitOld(data string) []Section {
	var out []Section
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *Section
	var body []string
	flush := func() {
		if cur != nil {
			cur.Body = trimBody(body)
			out = append(out, *cur)
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# nvidia-smi") {
			flush()
			cmd := strings.TrimPrefix(line, "# ")
			cur = &Section{Name: oldName(cmd), Command: cmd}
			body = nil
			continue
		}
		body = append(body, line)
	}
	flush()
	return out
}

func oldName(cmd string) string {
	switch {
	case strings.Contains(cmd, "--query-gpu"):
		return "query-gpu"
	case strings.Contains(cmd, "--query-compute-apps"):
		return "query-compute-apps"
	case strings.Contains(cmd, "--help-query-gpu"):
		return "help-query-gpu"
	case strings.Contains(cmd, "--list-gpus"):
		return "list (-L)"
	}
	return strings.TrimPrefix(cmd, "nvidia-smi ")
}

func isRule(s string) bool {
	return len(s) >= 20 && strings.Trim(s, "#") == ""
}

func trimBody(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}
