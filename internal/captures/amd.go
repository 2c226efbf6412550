package captures

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// The AMD captures: what amd-smi and rocm-smi printed on real GPUs, one
// file per command, copied from the sources README.md names.
//
//go:embed amd-smi/*.json rocm-smi/*.json
var amdFiles embed.FS

// The AMD tools, as their captures' folders are named.
const (
	AMDSMI  = "amd-smi"
	ROCmSMI = "rocm-smi"
)

// An AMDCapture is one real answer of an AMD tool. For amd-smi, Static
// and Metric are `amd-smi static --json` and `amd-smi metric --json` (nil
// where the source holds no such output); for rocm-smi, Out is
// `rocm-smi ... --json`.
type AMDCapture struct {
	Tool string // AMDSMI or ROCmSMI
	Name string // e.g. "mi100x4__rocm-6.0.2": GPU, then the release where known
	// ROCm is the ROCm release that printed it ("6.0.2"), "" where the
	// source does not say (README.md says what the shape suggests).
	ROCm                string
	Static, Metric, Out []byte
}

// AMDNames lists the embedded captures of one tool, sorted.
func AMDNames(tool string) []string {
	entries, _ := fs.ReadDir(amdFiles, tool)
	seen := map[string]bool{}
	var names []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".json")
		name = strings.TrimSuffix(strings.TrimSuffix(name, ".static"), ".metric")
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// LoadAMD reads one capture of one tool.
func LoadAMD(tool, name string) (AMDCapture, error) {
	if strings.ContainsAny(name, `/\`) || name == "" || strings.HasPrefix(name, ".") {
		return AMDCapture{}, fmt.Errorf("captures: %q is no capture name", name)
	}
	c := AMDCapture{Tool: tool, Name: name, ROCm: rocmRelease(name)}
	read := func(suffix string) []byte {
		data, err := amdFiles.ReadFile(path.Join(tool, name+suffix))
		if err != nil {
			return nil
		}
		return data
	}
	switch tool {
	case AMDSMI:
		c.Static, c.Metric = read(".static.json"), read(".metric.json")
		if c.Static == nil && c.Metric == nil {
			return AMDCapture{}, fmt.Errorf("captures: no %s capture %q", tool, name)
		}
	case ROCmSMI:
		if c.Out = read(".json"); c.Out == nil {
			return AMDCapture{}, fmt.Errorf("captures: no %s capture %q", tool, name)
		}
	default:
		return AMDCapture{}, fmt.Errorf("captures: no AMD tool %q", tool)
	}
	return c, nil
}

// MustLoadAMD is LoadAMD for captures known to be embedded.
func MustLoadAMD(tool, name string) AMDCapture {
	c, err := LoadAMD(tool, name)
	if err != nil {
		panic(err)
	}
	return c
}

// rocmRelease reads "6.0.2" out of a name holding "rocm-6.0.2".
func rocmRelease(name string) string {
	for _, part := range strings.Split(name, "__") {
		if v, ok := strings.CutPrefix(part, "rocm-"); ok {
			return v
		}
	}
	return ""
}
